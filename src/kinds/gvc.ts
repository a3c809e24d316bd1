import { randomInt } from 'node:crypto';
import { ApiError } from '../errors.js';
import { defineKind, standardPermissions } from './define.js';
import { linksAt, TRACING_SECRET_LINKS } from './references.js';
import { anyObject, arr, bool, dnsName, int, keyed, link, num, obj, oneOf, querySchema, readOnly, str, tracingSchema } from './schema.js';

// Seed 2.8, with the spec fields the public types show.

const ALIAS_FIRST = 'abcdefghijklmnopqrstuvwxyz';
const ALIAS_REST = 'abcdefghijklmnopqrstuvwxyz0123456789';

/** 13 random lowercase letters and digits, starting with a letter (usable as a DNS label). */
export function newAlias(): string {
  let alias = ALIAS_FIRST[randomInt(ALIAS_FIRST.length)];
  while (alias.length < 13) alias += ALIAS_REST[randomInt(ALIAS_REST.length)];
  return alias;
}

export default defineKind({
  kind: 'gvc',
  scope: 'org',
  summary: 'A global virtual cloud: a named set of locations that the workloads, identities and volume sets inside it share.',
  fields: {
    alias: readOnly(str({ maxLength: 64 })),
    spec: obj({
      staticPlacement: obj({
        locationLinks: arr(link(), { maxItems: 100 }),
        locationQuery: querySchema(),
        locationOptions: arr(
          obj(
            {
              locationLink: link(),
              routingTier: int({ minimum: 0 }),
              latencyOffsetMs: num(),
              latencyToleranceMs: num({ minimum: 0 }),
            },
            { required: ['locationLink'] },
          ),
          { maxItems: 100 },
        ),
      }),
      pullSecretLinks: arr(link(), { maxItems: 50 }),
      domain: dnsName(),
      endpointNamingFormat: oneOf(['default', 'legacy', 'org']),
      aliasWorkloadLink: link(),
      tracing: tracingSchema(),
      sidecar: obj({ envoy: anyObject() }),
      env: keyed(obj({ name: str({ minLength: 1, maxLength: 256 }), value: str({ maxLength: 65536 }) }, { required: ['name'] }), 'name', {
        maxItems: 200,
      }),
      loadBalancer: obj({
        dedicated: bool(),
        multiZone: obj({ enabled: bool() }),
        trustedProxies: int({ minimum: 0, maximum: 2 }),
        redirect: obj({ class: obj({ status5xx: str({ maxLength: 1024 }), status401: str({ maxLength: 1024 }) }) }),
        ipSet: str({ maxLength: 512 }),
      }),
      keda: obj({ enabled: bool(), identityLink: link(), secrets: arr(link(), { maxItems: 50 }) }),
    }),
    status: readOnly(anyObject()),
  },
  permissions: standardPermissions('GVCs'),
  defaults(item) {
    item.spec ??= {};
    if (typeof item.alias !== 'string' || item.alias === '') item.alias = newAlias();
  },
  references: (item) =>
    linksAt(item, [
      { at: 'spec.pullSecretLinks[]', kind: 'secret', permission: 'use' },
      { at: 'spec.aliasWorkloadLink', kind: 'workload', permission: 'view' },
      { at: 'spec.keda.identityLink', kind: 'identity', permission: 'use' },
      { at: 'spec.keda.secrets[]', kind: 'secret', permission: 'use' },
      ...TRACING_SECRET_LINKS,
    ]),
  links(_item, self) {
    return [
      { rel: 'workload', href: `${self}/workload` },
      { rel: 'identity', href: `${self}/identity` },
    ];
  },
  async beforeDelete(item, ctx) {
    const remaining: string[] = [];
    for (const [kind, plural] of [
      ['workload', 'workloads'],
      ['identity', 'identities'],
      ['volumeset', 'volume sets'],
    ] as const) {
      const count = await ctx.countInGvc(kind, item.name);
      if (count > 0) remaining.push(`${count} ${count === 1 ? kind : plural}`);
    }
    if (remaining.length) {
      throw new ApiError(
        'conflict',
        `gvc '${item.name}' still contains ${remaining.join(', ')}; delete them before deleting the gvc`,
        { remaining },
      );
    }
  },
});
