import { ApiError } from '../errors.js';
import { refuseBuiltinDelete } from './builtin.js';
import { defineKind, standardPermissions } from './define.js';
import { arr, bool, immutable, num, obj, oneOf, readOnly, str } from './schema.js';

// Seed 2.7. Cloud locations are seeded per org as built-ins (see locations-catalog.ts); clients
// can only add bring-your-own-Kubernetes (byok) locations. A built-in location cannot be deleted,
// but its tags, description and spec.enabled can be changed (the Terraform provider's
// cpln_location manages exactly `enabled` and `tags` of built-in locations such as
// aws-eu-central-1); provider and region never change.

export const LOCATION_PROVIDERS = ['aws', 'gcp', 'azure', 'byok', 'linode', 'vultr', 'equinix', 'oci'] as const;

export default defineKind({
  kind: 'location',
  scope: 'org',
  summary: 'A place where workloads run: a cloud region provided by the service, or a bring-your-own-Kubernetes cluster.',
  fields: {
    origin: readOnly(oneOf(['builtin', 'default', 'custom'])),
    provider: immutable(oneOf(LOCATION_PROVIDERS)),
    region: immutable(str({ maxLength: 64 })),
    spec: obj({ enabled: bool() }),
    status: readOnly(
      obj({
        geo: obj({
          lat: num({ minimum: -90, maximum: 90 }),
          lon: num({ minimum: -180, maximum: 180 }),
          country: str(),
          state: str(),
          city: str(),
          continent: str(),
        }),
        ipRanges: arr(str()),
      }),
    ),
  },
  required: ['provider'],
  permissions: standardPermissions('locations'),
  defaults(item) {
    item.origin ??= 'custom';
    const spec = (item.spec ??= {}) as Record<string, unknown>;
    spec.enabled ??= true;
  },
  check(item, _ctx, previous) {
    // Built-ins are written by the server with origin 'builtin'; everything a client creates must be byok.
    if (!previous && item.origin !== 'builtin' && item.provider !== 'byok') {
      throw ApiError.badRequest(
        `only byok locations can be created; ${String(item.provider)} locations are built in`,
        [{ path: 'provider', message: 'must be byok' }],
      );
    }
  },
  beforeDelete(item) {
    refuseBuiltinDelete(item);
  },
});
