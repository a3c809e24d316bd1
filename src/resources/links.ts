import { setOwn } from '../json.js';
import type { JsonSchema } from '../kinds/schema.js';
import type { Place, Scope } from '../kinds/types.js';

export interface LinkTarget {
  org: string;
  kind: string;
  gvc?: string;
  name: string;
}

/** Characters encodeURIComponent leaves as they are. */
const PLAIN_NAME = /^[\w.~-]*$/;

/** The full self link of an item (`/org/o/kind/n`, `/org/o/gvc/g/kind/n`, `/org/o` for orgs). */
export function selfLink(kind: string, scope: Scope, org: string, gvc: string, name: string): string {
  if (kind === 'org') return `/org/${org}`;
  // Characters a path segment may hold as they are (RFC 3986 pchar) stay unescaped: user links read
  // /org/o/user/a+b@c.d. Most names need no escaping at all (a test is cheaper than encoding).
  const n = PLAIN_NAME.test(name) ? name : encodeURIComponent(name).replace(/%(24|26|2B|2C|3A|3B|3D|40)/g, (e) => decodeURIComponent(e));
  return scope === 'gvc' ? `/org/${org}/gvc/${gvc}/${kind}/${n}` : `/org/${org}/${kind}/${n}`;
}

/**
 * Turns a relative link (`//location/L`, `//gvc/G/identity/I`, `//identity/I` inside a GVC)
 * into its full form; full links and anything else are returned unchanged.
 */
export function resolveLink(link: string, place: Place, gvcScoped: (kind: string) => boolean): string {
  if (!link.startsWith('//')) return link;
  const parts = link.slice(2).split('/');
  if (parts[0] !== 'gvc' && gvcScoped(parts[0]) && place.gvc && parts.length === 2) {
    return `/org/${place.org}/gvc/${place.gvc}/${parts.join('/')}`;
  }
  return `/org/${place.org}/${parts.join('/')}`;
}

/** Reads a full link; undefined when it does not address one resource. */
export function parseLink(link: string): LinkTarget | undefined {
  const parts = link.split('/');
  if (parts[0] !== '' || parts[1] !== 'org' || !parts[2]) return undefined;
  const org = parts[2];
  const rest = parts.slice(3).map(decodeURIComponent);
  if (rest.length === 0) return { org, kind: 'org', name: org };
  if (rest[0] === 'gvc' && rest.length === 4) return { org, gvc: rest[1], kind: rest[2], name: rest[3] };
  if (rest.length === 2) return { org, kind: rest[0], name: rest[1] };
  return undefined;
}

/** Resolves, in place, every link-typed field of `value` (format keel-link in its schema). */
export function resolveLinksIn(value: unknown, schema: JsonSchema | undefined, resolve: (link: string) => string): unknown {
  if (!schema || value === null || value === undefined) return value;
  if (typeof value === 'string') return schema.format === 'keel-link' ? resolve(value) : value;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) value[i] = resolveLinksIn(value[i], schema.items, resolve);
    return value;
  }
  if (typeof value === 'object') {
    const obj = value as Record<string, unknown>;
    for (const key of Object.keys(obj)) {
      const sub = schema.properties && Object.hasOwn(schema.properties, key) ? schema.properties[key] : typeof schema.additionalProperties === 'object' ? schema.additionalProperties : undefined;
      setOwn(obj, key, resolveLinksIn(obj[key], sub, resolve));
    }
  }
  return value;
}
