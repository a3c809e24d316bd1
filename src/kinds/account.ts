import { defineKind, standardPermissions } from './define.js';
import { anyObject, readOnly } from './schema.js';

// No public schema: Keel stores any spec and reports any status.
export default defineKind({
  kind: 'account',
  scope: 'org',
  summary: 'A billing account that owns orgs.',
  fields: {
    spec: anyObject(),
    status: readOnly(anyObject()),
  },
  permissions: standardPermissions('accounts'),
});
