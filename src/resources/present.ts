import { resourceSchema } from '../kinds/derive.js';
import type { KindDef, Link, Resource } from '../kinds/types.js';
import type { StoredItem } from '../store/types.js';
import { selfLink } from './links.js';

const LEADING = ['kind', 'id', 'name', 'description', 'version', 'tags', 'created', 'lastModified', 'links'];

export function itemSelfLink(def: KindDef, item: Pick<StoredItem, 'org' | 'gvc' | 'name'>): string {
  return selfLink(def.kind, def.scope, item.org, item.gvc, item.name);
}

/**
 * The API view of a stored item: common fields first in a fixed order, then the kind's fields
 * in schema order (PostgreSQL's JSONB does not keep key order), links derived from its place.
 */
export function present(def: KindDef, item: StoredItem, options: { reveal?: boolean } = {}): Resource {
  const self = itemSelfLink(def, item);
  const links: Link[] = [{ rel: 'self', href: self }];
  if (def.kind !== 'org') links.push({ rel: 'org', href: `/org/${item.org}` });
  if (def.scope === 'gvc') links.push({ rel: 'gvc', href: `/org/${item.org}/gvc/${item.gvc}` });
  const out: Record<string, unknown> = {
    kind: def.kind,
    id: item.id,
    name: item.name,
    description: item.data.description,
    version: item.version,
    tags: item.data.tags ?? {},
    created: item.created,
    lastModified: item.lastModified,
    links,
  };
  if (out.description === undefined) delete out.description;
  for (const key of Object.keys(resourceSchema(def).properties ?? {})) {
    if (!LEADING.includes(key) && item.data[key] !== undefined) out[key] = item.data[key];
  }
  const resource = out as Resource;
  if (def.derivedStatus) resource.status = { ...def.derivedStatus(resource), ...((item.data.status as Record<string, unknown> | undefined) ?? {}) };
  links.push(...(def.links?.(resource, self) ?? []));
  return options.reveal ? resource : withoutHidden(resource, def.hidden ?? []);
}

/** A copy without the kind's hidden paths (copied along each path, so nothing shared is changed). */
export function withoutHidden(resource: Resource, hidden: readonly string[]): Resource {
  let out = resource;
  for (const path of hidden) out = without(out, path.split('.')) as Resource;
  return out;
}

function without(value: Record<string, unknown>, [head, ...rest]: string[]): Record<string, unknown> {
  if (!Object.hasOwn(value, head)) return value;
  const inner = value[head];
  if (rest.length > 0 && (typeof inner !== 'object' || inner === null || Array.isArray(inner))) return value;
  // fromEntries defines own properties, so a key such as `__proto__` stays data, in its place.
  return Object.fromEntries(
    Object.entries(value).flatMap(([key, v]) => (key !== head ? [[key, v]] : rest.length > 0 ? [[key, without(inner as Record<string, unknown>, rest)]] : [])),
  );
}

/**
 * present() kept per stored item: the store shares an unchanged item's object between reads (and
 * never mutates it), so a hot item is presented and serialized once, not on every GET, and a
 * write's response and its audit event share one serialization. Callers must not mutate it.
 */
export function presented(def: KindDef, item: StoredItem): Resource {
  let resource = shared.get(item);
  if (resource === undefined) {
    resource = present(def, item);
    shared.set(item, resource);
  }
  return resource;
}
const shared = new WeakMap<StoredItem, Resource>();

/** A presented resource's JSON, serialized once. */
export function jsonOf(resource: Resource): string {
  let json = serialized.get(resource);
  if (json === undefined) {
    json = JSON.stringify(resource);
    serialized.set(resource, json);
  }
  return json;
}
const serialized = new WeakMap<object, string>();
