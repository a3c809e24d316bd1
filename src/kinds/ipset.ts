import { createHash } from 'node:crypto';
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
  // IpSetStatus: one address reserved per location, bound while the set names a workload. The
  // addresses come from 198.18.0.0/15 (reserved for testing), stable for the set and location.
  derivedStatus(item) {
    const spec = (item.spec ?? {}) as { link?: string; locations?: Array<{ name?: string }> };
    const ipAddresses = (spec.locations ?? []).map((l) => {
      const location = String(l.name ?? '').split('/').pop()!;
      const h = createHash('sha256').update(`${item.id}\u0000${location}`).digest();
      return {
        name: location,
        ip: `198.${18 + (h[0] & 1)}.${h[1]}.${h[2]}`,
        id: `ip-${h.subarray(3, 11).toString('hex')}`,
        state: spec.link ? 'bound' : 'unbound',
        created: item.created,
      };
    });
    return { ipAddresses };
  },
});
