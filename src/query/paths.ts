// Property paths. They are inlined into SQL JSON paths, so this charset check is a security boundary:
// only [A-Za-z0-9_-] segments, at most 10 of them, ever reach SQL text.

const SEGMENT = /^[A-Za-z0-9_-]+$/;
export const MAX_DEPTH = 10;
export const MAX_PATH_LENGTH = 256;

/** The segments of a valid dotted path, or undefined. */
export function pathSegments(path: string): string[] | undefined {
  if (path.length === 0 || path.length > MAX_PATH_LENGTH) return undefined;
  const segments = path.split('.');
  if (segments.length > MAX_DEPTH || !segments.every((s) => SEGMENT.test(s))) return undefined;
  return segments;
}

/** Like pathSegments, but for code that only ever sees parsed queries. */
export function checkedSegments(path: string): string[] {
  const segments = pathSegments(path);
  if (!segments) throw new Error(`invalid property path reached the query compiler: ${JSON.stringify(path)}`);
  return segments;
}

/** Rel names become `<rel>Link` JSON keys, so they follow the same charset. */
export function validRel(rel: string): boolean {
  return rel.length <= 64 && SEGMENT.test(rel);
}

/**
 * Common properties that live in real columns of `resources` (same values as in `data`). A Map:
 * a property named `constructor` or `toString` must not find Object.prototype's members.
 */
export const COLUMNS: ReadonlyMap<string, { column: string; type: 'string' | 'number' }> = new Map([
  ['name', { column: 'r.name', type: 'string' }],
  ['id', { column: 'r.id', type: 'string' }],
  ['version', { column: 'r.version', type: 'number' }],
  ['created', { column: 'r.created', type: 'string' }],
  ['lastModified', { column: 'r.last_modified', type: 'string' }],
]);

export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * The value at a path, walking objects only (never array indexes, as in SQL).
 * `links` are derived from an item's place and not stored, so queries do not see them.
 */
export function valueAt(item: Record<string, unknown>, segments: string[]): unknown {
  if (segments[0] === 'links') return undefined;
  let current: unknown = item;
  for (const segment of segments) {
    if (!isObject(current) || !Object.hasOwn(current, segment)) return undefined;
    current = current[segment];
  }
  return current;
}

/** The top-level values `property: '*'` looks at: all but `links` and those in `skip` (hiddenTopLevel). */
export function topLevelValues(item: Record<string, unknown>, skip: readonly string[] = []): unknown[] {
  return Object.entries(item)
    .filter(([key]) => key !== 'links' && !skip.includes(key))
    .map(([, value]) => value);
}

// What queries may see. A kind's hidden paths (secret `data`) are fields a plain read never shows;
// a query that could look at one would be an oracle on it (a right guess lists the item, a wrong
// one does not), so it may not look at all: parse.ts refuses every term and sort whose path meets a
// hidden one, and `property: '*'` (here and in compile.ts) skips the top-level fields that hold one.

/** The hidden path that reading `segments` would touch (the field itself, a part of it, or a field holding it). */
export function hiddenPathAt(segments: readonly string[], hidden: readonly string[] = []): string | undefined {
  return hidden.find((path) => {
    const parts = path.split('.');
    const n = Math.min(parts.length, segments.length);
    for (let i = 0; i < n; i++) if (parts[i] !== segments[i]) return false;
    return true;
  });
}

/** The top-level fields `property: '*'` skips. */
export function hiddenTopLevel(hidden: readonly string[] = []): string[] {
  return [...new Set(hidden.map((path) => path.split('.')[0]))];
}

/** The link a rel names: `<rel>Link` at the top level, else in spec. */
export function relLink(item: Record<string, unknown>, rel: string): string | undefined {
  const field = `${rel}Link`;
  const top = item[field];
  if (typeof top === 'string' && Object.hasOwn(item, field)) return top;
  const spec = item.spec;
  if (isObject(spec) && Object.hasOwn(spec, field) && typeof spec[field] === 'string') return spec[field] as string;
  return undefined;
}
