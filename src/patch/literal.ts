import type { JsonSchema } from '../kinds/schema.js';
import { at, fail } from './errors.js';
import { clone, isPlainObject, own, setOwn, type JsonObject } from '../json.js';
import { fieldSchema, isArraySchema, isObjectSchema, itemKey, itemsOf } from './schema.js';

/**
 * A value that a patch sets whole (plain arrays and scalars, `$replace/x`, `$append/x` items):
 * copied without interpreting `$` keys, except that server-owned (readOnly) fields the client
 * sent are dropped and the stored ones kept (matching keyed array items by identity), and fields
 * a closed object lacks are rejected.
 */
export function literal(value: unknown, schema: JsonSchema, stored: unknown, path: string): unknown {
  if (Array.isArray(value)) {
    if (!isArraySchema(schema)) return clone(value);
    const items = itemsOf(schema);
    // Items of a keyed array keep the server-owned fields of the stored item with their identity.
    const key = itemKey(schema);
    const storedItem = (item: unknown) => {
      const id = key?.of(item);
      return id === undefined || !Array.isArray(stored) ? undefined : stored.find((s) => key!.of(s) === id);
    };
    return value.map((item, i) => literal(item, items, storedItem(item), `${path}[${i}]`));
  }
  if (!isPlainObject(value) || !isObjectSchema(schema)) return clone(value);
  const out: JsonObject = {};
  for (const key of Object.keys(value)) {
    const field = fieldSchema(schema, key);
    if (!field) fail(at(path, key), 'is not a known field');
    if (field.readOnly) continue;
    setOwn(out, key, literal(value[key], field, isPlainObject(stored) ? own(stored, key) : undefined, at(path, key)));
  }
  if (isPlainObject(stored)) {
    for (const [key, field] of Object.entries(schema.properties ?? {})) {
      if (field.readOnly && Object.hasOwn(stored, key)) setOwn(out, key, clone(stored[key]));
    }
  }
  return out;
}
