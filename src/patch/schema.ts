// How the patch engine reads a kind's JSON Schema: which fields a level has, which values
// merge, and how the items of an array are identified.

import type { JsonSchema } from '../kinds/schema.js';
import { isPlainObject, own } from '../json.js';

/** Objects deep-merge under a plain patch field; every other value is replaced whole. */
export function isObjectSchema(schema: JsonSchema): boolean {
  return schema.type === 'object';
}

export function isArraySchema(schema: JsonSchema): boolean {
  return schema.type === 'array';
}

/** A link to a resource (kinds/schema.ts link()): relative forms name the same item as full ones. */
export function isLinkSchema(schema: JsonSchema): boolean {
  return schema.format === 'keel-link';
}

/** The schema of `key` at an object level, or undefined when a closed object has no such field. */
export function fieldSchema(schema: JsonSchema, key: string): JsonSchema | undefined {
  if (schema.properties && Object.hasOwn(schema.properties, key)) return schema.properties[key];
  const extra = schema.additionalProperties;
  if (extra === false) return undefined;
  // An open object without a value schema (anyObject) holds any JSON.
  return extra === undefined || extra === true ? {} : extra;
}

export function isRequired(schema: JsonSchema, key: string): boolean {
  return schema.required?.includes(key) ?? false;
}

/**
 * `$replace/x` only exists where a plain field would merge (objects and maps) or where the value
 * may take several types (a query term's `value`); the seed's patch bodies list it nowhere else.
 * For arrays and single-typed scalars a plain field already replaces, unless the kind marks the
 * array `x-replaceable` (a client sends it so).
 */
export function isReplaceable(schema: JsonSchema): boolean {
  return isObjectSchema(schema) || schema.type === undefined || Array.isArray(schema.type) || schema['x-replaceable'] === true;
}

export type Identity = string | number;

/** How the items of an array are told apart by `$drop/x`, `$retain/x`, `$patch/x`. */
export interface ItemKey {
  /** For messages: `name`, or `property|tag|rel` for query terms. */
  label: string;
  of(item: unknown): Identity | undefined;
  /** Whether two items may share an identity (query terms may: `created > a` and `created < b`). */
  unique: boolean;
}

const TERM_SELECTORS = ['property', 'tag', 'rel'] as const;

const termKey: ItemKey = {
  label: TERM_SELECTORS.join('|'),
  of(item) {
    if (!isPlainObject(item)) return undefined;
    for (const selector of TERM_SELECTORS) {
      const value = own(item, selector);
      if (typeof value === 'string') return value;
    }
    return undefined;
  },
  unique: false,
};

function namedKey(key: string): ItemKey {
  return {
    label: key,
    of(item) {
      const value = isPlainObject(item) ? own(item, key) : undefined;
      return typeof value === 'string' || typeof value === 'number' ? value : undefined;
    },
    unique: true,
  };
}

/** Query terms carry no name: an item schema with `op` and a selector is recognised as one. */
function isTermSchema(items: JsonSchema | undefined): boolean {
  const props = items?.properties;
  return !!props && Object.hasOwn(props, 'op') && TERM_SELECTORS.some((s) => Object.hasOwn(props, s));
}

/** The identity of an array's items: `x-key` (`'$term'` for query terms), else undefined. */
export function itemKey(schema: JsonSchema): ItemKey | undefined {
  const key = schema['x-key'];
  if (key === '$term' || (key === undefined && isTermSchema(schema.items))) return termKey;
  return typeof key === 'string' ? namedKey(key) : undefined;
}

export function itemsOf(schema: JsonSchema): JsonSchema {
  return schema.items ?? {};
}
