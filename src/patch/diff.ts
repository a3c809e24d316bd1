import type { JsonSchema } from '../kinds/schema.js';
import { clone, deepEqual, isPlainObject, setOwn, type JsonObject } from '../json.js';
import { fieldSchema, isObjectSchema } from './schema.js';

/**
 * A patch that turns `a` into `b` under applyPatch: plain fields where they suffice, `null` for
 * removed fields, and `$replace/x` for an object that a merge cannot express (a `null` value or
 * a `$`-prefixed key inside it). Server-owned (readOnly) fields are left out: no patch sets them.
 */
export function diffPatch(a: Record<string, unknown>, b: Record<string, unknown>, schema: JsonSchema): Record<string, unknown> {
  const patch = diffLevel(a, b, schema);
  if (!patch) throw new Error('diffPatch: the difference cannot be expressed by a patch at the top level');
  return patch;
}

/** The patch for one object level, or undefined when plain fields cannot express it. */
function diffLevel(a: JsonObject, b: JsonObject, schema: JsonSchema): JsonObject | undefined {
  const patch: JsonObject = {};
  for (const key of Object.keys(a)) {
    if (Object.hasOwn(b, key) || fieldSchema(schema, key)?.readOnly) continue;
    // A `$` key in a patch is a directive, so a map key like `$x` cannot be named plainly.
    if (key.startsWith('$')) return undefined;
    setOwn(patch, key, null);
  }
  for (const key of Object.keys(b)) {
    const field = fieldSchema(schema, key);
    if (!field) return undefined;
    if (field.readOnly || (Object.hasOwn(a, key) && deepEqual(a[key], b[key]))) continue;
    const value = b[key];
    if (key.startsWith('$') || value === null) return undefined;
    if (isPlainObject(value) && isObjectSchema(field)) {
      const stored = Object.hasOwn(a, key) ? a[key] : undefined;
      const sub = diffLevel(isPlainObject(stored) ? stored : {}, value, field);
      setOwn(patch, sub ? key : `$replace/${key}`, sub ?? clone(value));
    } else {
      setOwn(patch, key, clone(value));
    }
  }
  return patch;
}
