import type { JsonSchema } from '../kinds/schema.js';
import { checkDepth } from './depth.js';
import { at, fail } from './errors.js';
import { keepImmutable } from './immutable.js';
import { clone, isPlainObject, own, setOwn, type JsonObject } from '../json.js';
import { literal } from './literal.js';
import { fieldSchema, isArraySchema, isLinkSchema, isObjectSchema, isReplaceable, isRequired, itemKey, itemsOf, type ItemKey } from './schema.js';

// The order in which one object level of a patch is applied (DESIGN.md, "Patch directive order").
const ORDER = ['$drop', 'plain', 'replace', 'drop', 'retain', 'patch', 'append'] as const;
type Op = (typeof ORDER)[number];

const DIRECTIVE = /^\$(replace|drop|retain|patch|append)\/(.+)$/s;

export interface PatchOptions {
  /**
   * The full form of a link as it would be stored (relative links expanded). `$drop/x`, `$retain/x`
   * and `$append/x` on a list of links compare links in this form, so that `//serviceaccount/a`
   * finds the stored `/org/o/serviceaccount/a`. Without it links compare as sent.
   */
  link?: (link: string) => string;
}

interface Step {
  /** The key as written in the patch, for error paths. */
  key: string;
  /** The field the step changes (`containers` for `$patch/containers`). */
  field: string;
  value: unknown;
}

/**
 * Applies a PATCH body to a stored object, driven by the kind's JSON Schema. Returns a new
 * object and leaves both inputs untouched; throws ApiError 400 (details.errors = [{path,
 * message}]) for a patch the schema does not allow. The result is not validated: the caller
 * validates (and coerces) it against the full schema.
 */
export function applyPatch(
  current: Record<string, unknown>,
  patch: Record<string, unknown>,
  schema: JsonSchema,
  options: PatchOptions = {},
): Record<string, unknown> {
  if (!isPlainObject(patch)) fail('', 'must be a JSON object');
  checkDepth(patch);
  const result = clone(current) as JsonObject;
  patchLevel(result, patch, schema, '', options);
  keepImmutable(current, result, schema, '');
  return result;
}

/** Applies one object level of a patch to `obj`, a private copy that is changed in place. */
function patchLevel(obj: JsonObject, patch: JsonObject, schema: JsonSchema, path: string, options: PatchOptions): void {
  const steps = plan(patch, path);
  for (const op of ORDER) {
    for (const step of steps[op]) {
      if (op === '$drop') dropFields(obj, step, schema, path);
      else if (op === 'plain') setField(obj, step, schema, path, options);
      else if (op === 'replace') replaceField(obj, step, schema, path);
      else if (op === 'drop' || op === 'retain') filterItems(obj, step, schema, path, op === 'retain', options);
      else if (op === 'patch') patchItems(obj, step, schema, path, options);
      else appendItems(obj, step, schema, path, options);
    }
  }
}

function plan(patch: JsonObject, path: string): Record<Op, Step[]> {
  const steps: Record<Op, Step[]> = { $drop: [], plain: [], replace: [], drop: [], retain: [], patch: [], append: [] };
  for (const key of Object.keys(patch)) {
    const value = patch[key];
    if (!key.startsWith('$')) {
      steps.plain.push({ key, field: key, value });
    } else if (key === '$drop') {
      steps.$drop.push({ key, field: key, value });
    } else {
      const match = DIRECTIVE.exec(key);
      if (!match) fail(at(path, key), 'is not a known directive');
      steps[match[1] as Op].push({ key, field: match[2], value });
    }
  }
  return steps;
}

/** The schema of the field a step addresses; undefined for server-owned fields, which are ignored. */
function fieldOf(schema: JsonSchema, step: Step, path: string): JsonSchema | undefined {
  const field = fieldSchema(schema, step.field);
  if (!field) fail(at(path, step.key), step.key === step.field ? 'is not a known field' : `'${step.field}' is not a known field`);
  return field.readOnly ? undefined : field;
}

function removeField(obj: JsonObject, key: string, field: JsonSchema, path: string): void {
  if (field['x-immutable'] && own(obj, key) !== undefined) fail(path, `'${key}' is immutable and cannot be removed`);
  delete obj[key];
}

function dropFields(obj: JsonObject, step: Step, schema: JsonSchema, path: string): void {
  const dropPath = at(path, '$drop');
  const names = step.value;
  if (!Array.isArray(names) || !names.every((n) => typeof n === 'string')) fail(dropPath, 'must be an array of field names');
  names.forEach((name: string, i) => {
    const entryPath = `${dropPath}[${i}]`;
    const field = fieldSchema(schema, name);
    if (!field) fail(entryPath, `'${name}' is not a known field`);
    if (isRequired(schema, name)) fail(entryPath, `'${name}' is required and cannot be dropped`);
    if (!field.readOnly) removeField(obj, name, field, entryPath);
  });
}

function setField(obj: JsonObject, step: Step, schema: JsonSchema, path: string, options: PatchOptions): void {
  const field = fieldOf(schema, step, path);
  if (!field) return;
  const fieldPath = at(path, step.key);
  if (step.value === null) {
    removeField(obj, step.field, field, fieldPath);
  } else if (isPlainObject(step.value) && isObjectSchema(field)) {
    const stored = own(obj, step.field);
    const merged = isPlainObject(stored) ? stored : {};
    patchLevel(merged, step.value, field, fieldPath, options);
    setOwn(obj, step.field, merged);
  } else {
    setOwn(obj, step.field, literal(step.value, field, own(obj, step.field), fieldPath));
  }
}

function replaceField(obj: JsonObject, step: Step, schema: JsonSchema, path: string): void {
  const field = fieldOf(schema, step, path);
  if (!field) return;
  const fieldPath = at(path, step.key);
  if (!isReplaceable(field)) fail(fieldPath, `'${step.field}' is replaced by sending it as a plain field`);
  if (step.value === null) removeField(obj, step.field, field, fieldPath);
  else if (isObjectSchema(field) && !isPlainObject(step.value)) fail(fieldPath, 'must be an object');
  else setOwn(obj, step.field, literal(step.value, field, own(obj, step.field), fieldPath));
}

/** The schema of an array field a `$drop/`, `$retain/`, `$patch/` or `$append/` step addresses. */
function arrayTarget(schema: JsonSchema, step: Step, path: string): JsonSchema | undefined {
  const field = fieldOf(schema, step, path);
  if (field && !isArraySchema(field)) fail(at(path, step.key), `'${step.field}' is not an array`);
  if (field && !Array.isArray(step.value)) fail(at(path, step.key), 'must be an array');
  return field;
}

/** The identity of an array's object items; arrays of objects without one cannot be addressed by item. */
function keyOf(field: JsonSchema, step: Step, path: string): ItemKey | undefined {
  const key = itemKey(field);
  if (!key && isObjectSchema(itemsOf(field))) fail(at(path, step.key), `the items of '${step.field}' have no identity key`);
  return key;
}

function storedList(obj: JsonObject, field: string): unknown[] {
  const stored = own(obj, field);
  return Array.isArray(stored) ? stored : [];
}

/** How a directive compares a list's plain values: links in their stored (full) form, others as they are. */
function comparable(field: JsonSchema, options: PatchOptions): (value: unknown) => unknown {
  const { link } = options;
  return link && isLinkSchema(itemsOf(field)) ? (value) => (typeof value === 'string' ? link(value) : value) : (value) => value;
}

/** `$drop/x` removes the listed items, `$retain/x` keeps only them: values, or identities of objects. */
function filterItems(obj: JsonObject, step: Step, schema: JsonSchema, path: string, keep: boolean, options: PatchOptions): void {
  const field = arrayTarget(schema, step, path);
  if (!field) return;
  const key = keyOf(field, step, path);
  const listed = step.value as unknown[];
  listed.forEach((entry, i) => {
    const ok = key ? typeof entry === 'string' || typeof entry === 'number' : typeof entry !== 'object' || entry === null;
    if (!ok) fail(`${at(path, step.key)}[${i}]`, key ? `must be the ${key.label} of an item` : 'must be a plain value');
  });
  const stored = own(obj, step.field);
  if (!Array.isArray(stored)) return;
  const form = comparable(field, options);
  const wanted = new Set(listed.map(form));
  const kept = stored.filter((item) => wanted.has(key ? key.of(item) : form(item)) === keep);
  setOwn(obj, step.field, kept);
}

/** `$patch/x`: each partial item patches the stored items with its identity, or is appended. */
function patchItems(obj: JsonObject, step: Step, schema: JsonSchema, path: string, options: PatchOptions): void {
  const field = arrayTarget(schema, step, path);
  if (!field) return;
  const key = keyOf(field, step, path);
  const items = itemsOf(field);
  if (!key || !isObjectSchema(items)) fail(at(path, step.key), `the items of '${step.field}' are not objects`);
  const list = storedList(obj, step.field);
  (step.value as unknown[]).forEach((partial, i) => {
    const itemPath = `${at(path, step.key)}[${i}]`;
    if (!isPlainObject(partial)) fail(itemPath, 'must be an object');
    const id = key.of(partial);
    if (id === undefined) fail(itemPath, `must carry its ${key.label}`);
    const matches = list.filter((item): item is JsonObject => isPlainObject(item) && key.of(item) === id);
    // A missing identity appends: the CLI sets a new env var with `$patch/env`.
    if (matches.length === 0) {
      const added: JsonObject = {};
      patchLevel(added, partial, items, itemPath, options);
      list.push(added);
    }
    for (const item of matches) patchLevel(item, partial, items, itemPath, options);
  });
  setOwn(obj, step.field, list);
}

/** `$append/x`: adds items, skipping primitives already present; a named item must be new. */
function appendItems(obj: JsonObject, step: Step, schema: JsonSchema, path: string, options: PatchOptions): void {
  const field = arrayTarget(schema, step, path);
  if (!field) return;
  const key = itemKey(field);
  const list = storedList(obj, step.field);
  const form = comparable(field, options);
  const present = new Set(list.map(form));
  (step.value as unknown[]).forEach((item, i) => {
    if (typeof item !== 'object' || item === null) {
      // A link is appended in its full form, the form it is stored in.
      const value = form(item);
      if (!present.has(value)) {
        present.add(value);
        list.push(value);
      }
      return;
    }
    const itemPath = `${at(path, step.key)}[${i}]`;
    const added = literal(item, itemsOf(field), undefined, itemPath);
    const id = key?.unique ? key.of(added) : undefined;
    if (id !== undefined && list.some((stored) => key!.of(stored) === id)) {
      fail(itemPath, `an item with ${key!.label} '${id}' already exists; use $patch/${step.field} to change it`);
    }
    list.push(added);
  });
  setOwn(obj, step.field, list);
}
