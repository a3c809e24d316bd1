import { opaqueKind } from './define.js';

// A read-only projection the server computes; Keel stores no schema for it.
export default opaqueKind('accessreport', 'A computed report of which principals hold which permissions on an item, and through which policies.', { operations: { create: false, update: false, delete: false } });
