import { defineKind } from './define.js';
import { anyObject, readOnly } from './schema.js';

// No public schema: Keel stores any spec and reports any status.
export default defineKind({
  kind: 'link',
  scope: 'org',
  summary: 'A resource reference as returned by queries that fetch links instead of items.',
  fields: {
    spec: anyObject(),
    status: readOnly(anyObject()),
  },
  permissions: [
    { name: 'manage', description: 'Full access' },
    { name: 'view', description: 'Read-only access' },
  ],
});
