import { opaqueKind } from './define.js';

// No public schema: Keel stores any spec and reports any status.
export default opaqueKind('imagesummary', 'A summary of the image repositories of an org and how many tags each holds.');
