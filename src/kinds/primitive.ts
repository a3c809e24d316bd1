import { opaqueKind } from './define.js';

// No public schema: Keel stores any spec and reports any status.
export default opaqueKind('primitive', 'An internal building block of other resources; listed for completeness.');
