import { defineKind, standardPermissions } from './define.js';
import { anyObject, arr, obj, readOnly, str } from './schema.js';

// Public types (tenant.ts): the orgs and clusters a tenant groups.
export default defineKind({
  kind: 'tenant',
  scope: 'org',
  summary: 'A tenant grouping of orgs under one account.',
  fields: {
    spec: obj({ orgs: arr(str({ maxLength: 512 }), { maxItems: 1000 }), clusters: arr(str({ maxLength: 512 }), { maxItems: 1000 }) }),
    status: readOnly(anyObject()),
  },
  permissions: standardPermissions('tenants'),
});
