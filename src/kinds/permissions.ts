import { opaqueKind } from './define.js';

// A read-only projection the server computes; Keel stores no schema for it.
export default opaqueKind('permissions', 'The permission schema of a kind: which permissions a policy can grant on it and what each implies.', { operations: { create: false, update: false, delete: false } });
