import { opaqueKind } from './define.js';

// No public schema: Keel stores any spec and reports any status.
export default opaqueKind('foreign', 'A reference to an object that lives outside the org.');
