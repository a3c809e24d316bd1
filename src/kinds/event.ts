import { opaqueKind } from './define.js';

// A read-only projection the server computes; Keel stores no schema for it.
export default opaqueKind('event', 'A platform event about an item (its event log); written by the server only.', { operations: { create: false, update: false, delete: false } });
