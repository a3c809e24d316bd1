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

/** Common properties that live in real columns of `resources` (same values as in `data`). */
export const COLUMNS: Record<string, { column: string; type: 'string' | 'number' }> = {
  name: { column: 'r.name', type: 'string' },
  id: { column: 'r.id', type: 'string' },
  version: { column: 'r.version', type: 'number' },
  created: { column: 'r.created', type: 'string' },
  lastModified: { column: 'r.last_modified', type: 'string' },
};

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

/** The top-level values `property: '*'` looks at. */
export function topLevelValues(item: Record<string, unknown>): unknown[] {
  return Object.entries(item)
    .filter(([key]) => key !== 'links')
    .map(([, value]) => value);
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
