import { defineKind, standardPermissions } from './define.js';
import { anyObject, readOnly } from './schema.js';

// No public detail Keel relies on: any spec is stored.
export default defineKind({
  kind: 'resourcepolicy',
  scope: 'org',
  summary: 'A policy that constrains how resources of the org may be configured.',
  fields: {
    spec: anyObject(),
    status: readOnly(anyObject()),
  },
  permissions: standardPermissions('resource policies'),
});
