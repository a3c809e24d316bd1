import { ApiError } from '../errors.js';
import { findKind } from '../kinds/index.js';
import type { KindDef, Place } from '../kinds/types.js';
import { selfLink } from '../resources/links.js';
import { keyOf, targetOf } from '../resources/service.js';
import type { Store } from '../store/types.js';
import type { Authorizer } from './authorizer.js';
import type { Principal } from './principal.js';

/**
 * GET <item>/-accessreport (api-semantics §9.6): for every permission of the item's kind, each
 * principal a policy binding grants it to, the policy, the binding's permissions and how the policy
 * targets the item. Readable with the org's `viewAccessReport` or `manage` on the item.
 */
export async function accessReport(store: Store, auth: Authorizer, principal: Principal, def: KindDef, place: Place, name: string) {
  await auth.requireMember(principal, place.org);
  const item = await store.get(keyOf(def, place, name));
  if (!item) throw ApiError.notFound(`${def.kind} '${name}' not found${def.scope === 'gvc' ? ` in gvc '${place.gvc}'` : ''}`);
  const target = targetOf(item);
  try {
    await auth.check(principal, 'viewAccessReport', findKind('org')!, { org: place.org, name: place.org });
  } catch (err) {
    if (!(err instanceof ApiError && err.code === 'forbidden')) throw err;
    await auth.check(principal, 'manage', def, target);
  }
  const report = await auth.accessReport(def, target);
  const self = selfLink(def.kind, def.scope, item.org, item.gvc, item.name);
  return {
    kind: 'accessreport',
    permissions: def.permissions.map((p) => ({ name: p.name, description: p.description, bindings: report.get(p.name) ?? [] })),
    created: new Date().toISOString(),
    links: [
      { rel: 'self', href: `${self}/-accessreport` },
      { rel: 'target', href: self },
    ],
  };
}
