import { defineKind, standardPermissions } from './define.js';
import { anyObject, readOnly } from './schema.js';

// No public schema: Keel stores any spec and reports any status.
export default defineKind({
  kind: 'resource',
  scope: 'org',
  summary: 'A generic record of a resource known to the org, used by reports and cross-kind views.',
  fields: {
    spec: anyObject(),
    status: readOnly(anyObject()),
  },
  permissions: standardPermissions('resources'),
});
