import { defineKind, standardPermissions } from './define.js';
import { anyObject, keyed, link, obj, oneOf, readOnly } from './schema.js';

// Public types (types-ts ipSet.ts): reserved public IPs per location, optionally bound to a workload.
export default defineKind({
  kind: 'ipset',
  scope: 'org',
  summary: 'A set of reserved public IP addresses, one or more per location, that a workload can be reached on.',
  fields: {
    spec: obj({
      link: link(),
      locations: keyed(
        obj({ name: link(), retentionPolicy: oneOf(['keep', 'free']) }, { required: ['name', 'retentionPolicy'] }),
        'name',
        { maxItems: 100 },
      ),
    }),
    status: readOnly(anyObject()),
  },
  permissions: standardPermissions('IP sets'),
});
