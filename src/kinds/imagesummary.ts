import { defineKind } from './define.js';
import { anyObject, readOnly } from './schema.js';

// No public schema: Keel stores any spec and reports any status.
export default defineKind({
  kind: 'imagesummary',
  scope: 'org',
  summary: 'A summary of the image repositories of an org and how many tags each holds.',
  fields: {
    spec: anyObject(),
    status: readOnly(anyObject()),
  },
  permissions: [
    { name: 'manage', description: 'Full access' },
    { name: 'view', description: 'Read-only access' },
  ],
});
