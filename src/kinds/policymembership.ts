import { defineKind, standardPermissions } from './define.js';
import { anyObject, readOnly } from './schema.js';

// No public schema: Keel stores any spec and reports any status.
export default defineKind({
  kind: 'policymembership',
  scope: 'org',
  summary: 'A computed membership of a principal in a policy binding.',
  fields: {
    spec: anyObject(),
    status: readOnly(anyObject()),
  },
  permissions: standardPermissions('policy memberships'),
});
