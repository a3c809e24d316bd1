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
  const n = escapeSegment(name);
  return scope === 'gvc' ? `/org/${org}/gvc/${gvc}/${kind}/${n}` : `/org/${org}/${kind}/${n}`;
}

/**
 * A name as a path segment of a link. Characters a segment may hold as they are (RFC 3986 pchar)
 * stay unescaped: user links read /org/o/user/a+b@c.d. Most names need no escaping at all (a test
 * is cheaper than encoding).
 */
function escapeSegment(name: string): string {
  return PLAIN_NAME.test(name) ? name : encodeURIComponent(name).replace(/%(24|26|2B|2C|3A|3B|3D|40)/g, (e) => decodeURIComponent(e));
}

/**
 * A link in the one form it is stored and compared in, so that one link is one string: relative
 * links (`//location/L`, `//gvc/G/identity/I`, `//identity/I` inside a GVC) made full, empty and
 * dot segments dropped (`/org/o//x/./y/`, `/org/o/x/../x/y`), and each segment escaped as self links
 * escape names (`/org/o/x/%61` is `/org/o/x/a`). Anything that is not a path (no leading '/', or a
 * query, fragment or whitespace) is returned unchanged, for validation to refuse.
 */
export function resolveLink(link: string, place: Place, gvcScoped: (kind: string) => boolean): string {
  if (!link.startsWith('/') || NOT_A_PATH.test(link)) return link;
  const segments: string[] = [];
  for (const raw of link.split('/')) {
    if (raw === '' || raw === '.') continue;
    if (raw === '..') segments.pop();
    else segments.push(raw);
  }
  let parts = segments.map(canonicalSegment);
  if (link.startsWith('//')) {
    const inGvc = parts[0] !== 'gvc' && gvcScoped(parts[0]) && place.gvc && parts.length === 2;
    parts = inGvc ? ['org', place.org, 'gvc', place.gvc!, ...parts] : ['org', place.org, ...parts];
  }
  return `/${parts.join('/')}`;
}

/** What no link holds (a query, a fragment, whitespace): left as sent, for validation to refuse. */
const NOT_A_PATH = /[\s?#]/;

/** A segment decoded and escaped again in the one way self links escape; one that is not valid percent-encoding stays as sent. */
function canonicalSegment(raw: string): string {
  if (PLAIN_NAME.test(raw)) return raw;
  try {
    return escapeSegment(decodeURIComponent(raw));
  } catch {
    return raw;
  }
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
    // A list of links holds each link once, whatever forms of it were sent.
    return schema.items?.format === 'keel-link' ? [...new Set(value)] : value;
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
