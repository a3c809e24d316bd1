import { defineKind } from './define.js';
import { anyObject, readOnly } from './schema.js';

// No public schema: Keel stores any spec and reports any status.
export default defineKind({
  kind: 'permissions',
  scope: 'org',
  summary: 'The permission schema of a kind: which permissions a policy can grant on it and what each implies.',
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
