import type { JsonSchema } from '../kinds/schema.js';
import { at, fail } from './errors.js';
import { clone, deepEqual, isPlainObject, setOwn, type JsonObject } from '../json.js';
import { isArraySchema, isObjectSchema, itemKey, itemsOf } from './schema.js';

/**
 * Compares the patched object with the stored one for `x-immutable` fields: a changed value is
 * a 400 naming the field (an unchanged one is fine, clients echo whole objects); a value that
 * vanished because an ancestor was replaced whole (`$replace/spec` without it) is kept.
 * Explicit removals (`null`, `$drop`) are refused where they are applied.
 */
export function keepImmutable(stored: unknown, patched: JsonObject, schema: JsonSchema, path: string): void {
  if (!isPlainObject(stored) || !isObjectSchema(schema)) return;
  for (const [key, field] of Object.entries(schema.properties ?? {})) {
    if (!Object.hasOwn(stored, key) || field.readOnly) continue;
    const before = stored[key];
    const after = Object.hasOwn(patched, key) ? patched[key] : undefined;
    if (field['x-immutable']) {
      if (after === undefined) setOwn(patched, key, clone(before));
      else if (!deepEqual(before, after)) fail(at(path, key), 'is immutable and cannot be changed');
    } else if (isPlainObject(after)) {
      keepImmutable(before, after, field, at(path, key));
    } else if (Array.isArray(before) && Array.isArray(after) && isArraySchema(field)) {
      keepImmutableItems(before, after, field, at(path, key));
    }
  }
}

/** Items of a keyed array are compared with the stored item of the same identity. */
function keepImmutableItems(before: unknown[], after: unknown[], schema: JsonSchema, path: string): void {
  const key = itemKey(schema);
  if (!key?.unique) return;
  after.forEach((item, i) => {
    const id = key.of(item);
    const old = id === undefined ? undefined : before.find((b) => key.of(b) === id);
    if (isPlainObject(item)) keepImmutable(old, item, itemsOf(schema), `${path}[${i}]`);
  });
}
