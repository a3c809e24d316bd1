import { defineKind, standardPermissions } from './define.js';
import { newAlias } from './gvc.js';
import { anyObject, arr, link, obj, readOnly, str } from './schema.js';

// Public types (types-ts spicedb.ts).
export default defineKind({
  kind: 'spicedbcluster',
  scope: 'org',
  summary: 'A managed SpiceDB (authorization database) cluster available to workloads in chosen locations.',
  fields: {
    alias: readOnly(str()),
    spec: obj({ version: str({ maxLength: 16 }), locations: arr(link(), { maxItems: 50 }) }),
    status: readOnly(anyObject()),
  },
  permissions: standardPermissions('SpiceDB clusters'),
  defaults(item) {
    if (typeof item.alias !== 'string' || item.alias === '') item.alias = newAlias();
  },
  // ClusterStatus of the public types: where clients outside the platform reach the cluster.
  derivedStatus: (item) => ({ externalEndpoint: `${String(item.alias)}.spicedb.keel.local:443` }),
});
