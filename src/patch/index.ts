export { applyPatch, type PatchOptions } from './apply.js';
export { diffPatch } from './diff.js';
export { MAX_DEPTH } from './depth.js';
export { itemKey, type ItemKey } from './schema.js';
