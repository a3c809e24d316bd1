import { opaqueKind } from './define.js';

// No public schema: Keel stores any spec and reports any status.
export default opaqueKind('link', 'A resource reference as returned by queries that fetch links instead of items.');
