// Keel's catalogue of the public types' fields (test/fixtures/public-types/catalogue.json, compiled
// by scripts/public-types.ts) and the helpers that hold Keel's kind schemas against it.
import { readFileSync } from 'node:fs';
import type { JsonSchema } from '../../src/kinds/schema.js';

export interface FieldEntry {
  type: 'string' | 'number' | 'boolean' | 'object' | 'array' | 'map' | 'any';
  enum?: Array<string | number | boolean>;
  required?: true;
  from: Array<'types' | 'terraform'>;
}

export interface Catalogue {
  sources: Record<string, { repository: string; commit: string }>;
  kinds: Record<string, Record<string, FieldEntry>>;
}

export const CATALOGUE: Catalogue = JSON.parse(readFileSync(new URL('../fixtures/public-types/catalogue.json', import.meta.url), 'utf8'));

/** `spec.ports[].routes[].port` → ['spec', 'ports', '[]', 'routes', '[]', 'port']. */
export function segments(path: string): string[] {
  return path.split('.').flatMap((part) => {
    const name = part.replace(/(\[\])+$/, '');
    const arrays = (part.length - name.length) / 2;
    return [name, ...Array<string>(arrays).fill('[]')];
  });
}

export interface Resolved {
  /** Keel's schema of the field, when Keel details it. */
  schema?: JsonSchema;
  /** Reached through an object Keel stores as sent (no properties of its own, or open to more). */
  open: boolean;
  /** Keel owns the field: a client's value is ignored. */
  readOnly: boolean;
}

/** Where a catalogue path lands in Keel's schema; undefined when Keel does not know the field. */
export function resolve(root: JsonSchema, path: string): Resolved | undefined {
  let schema: JsonSchema = root;
  let readOnly = false;
  for (const seg of segments(path)) {
    readOnly ||= schema.readOnly === true;
    const alternatives = schema.oneOf ?? schema.anyOf;
    if (alternatives && !schema.properties) {
      const branch = alternatives.find((alt) => (seg === '[]' ? alt.items : alt.properties?.[seg]));
      if (branch) schema = branch;
    }
    if (seg === '[]') {
      if (!schema.items) return isOpen(schema) ? { open: true, readOnly } : undefined;
      schema = schema.items;
      continue;
    }
    const next = schema.properties?.[seg];
    if (next) {
      schema = next;
      continue;
    }
    if (typeof schema.additionalProperties === 'object') {
      schema = schema.additionalProperties;
      continue;
    }
    return isOpen(schema) ? { open: true, readOnly } : undefined;
  }
  return { schema, open: false, readOnly: readOnly || schema.readOnly === true };
}

function isOpen(schema: JsonSchema): boolean {
  if (schema.additionalProperties === false) return false;
  if (schema.type === undefined) return true;
  return schema.type === 'object' || (Array.isArray(schema.type) && schema.type.includes('object'));
}

/** Whether `sent` is found in `got`: every field sent is there with its value (the server may add more). */
export function contains(got: unknown, sent: unknown): boolean {
  if (Array.isArray(sent)) return Array.isArray(got) && sent.length === got.length && sent.every((v, i) => contains(got[i], v));
  if (sent && typeof sent === 'object') {
    if (!got || typeof got !== 'object') return false;
    return Object.entries(sent).every(([k, v]) => contains((got as Record<string, unknown>)[k], v));
  }
  return got === sent;
}
