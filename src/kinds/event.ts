import { defineKind } from './define.js';
import { anyObject, readOnly } from './schema.js';

// No public schema: Keel stores any spec and reports any status.
export default defineKind({
  kind: 'event',
  scope: 'org',
  summary: 'A platform event about an item (its event log); written by the server only.',
  fields: {
    spec: anyObject(),
    status: readOnly(anyObject()),
  },
  permissions: [
    { name: 'manage', description: 'Full access' },
    { name: 'view', description: 'Read-only access' },
  ],
  operations: { create: false, update: false, delete: false },
});
