import { defineKind, standardPermissions } from './define.js';
import { anyObject, readOnly } from './schema.js';

// No public schema: Keel stores any spec and reports any status.
export default defineKind({
  kind: 'tenant',
  scope: 'org',
  summary: 'A tenant grouping of orgs under one account.',
  fields: {
    spec: anyObject(),
    status: readOnly(anyObject()),
  },
  permissions: standardPermissions('tenants'),
});
