import { defineKind } from './define.js';
import { anyObject, readOnly } from './schema.js';

// No public schema: Keel stores any spec and reports any status.
export default defineKind({
  kind: 'deployment',
  scope: 'org',
  summary: 'The state of a workload in one location (named after the location); computed by the server.',
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
