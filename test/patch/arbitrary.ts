// fast-check generators driven by a JsonSchema: random valid objects of a kind, and random
// patches that are valid for a given stored object (so their result must validate).
import fc from 'fast-check';
import { NAME_PATTERN, type JsonSchema } from '../../src/kinds/schema.js';
import { FORMATS } from '../../src/kinds/formats.js';
import { itemKey } from '../../src/patch/index.js';
import { isReplaceable } from '../../src/patch/schema.js';

type Obj = Record<string, unknown>;

export interface ValueOptions {
  /** Include server-owned fields (a stored object has them; a client body need not). */
  readOnly?: boolean;
  /** Leave out `$`-prefixed map keys, which a patch would read as directives. */
  patchSafe?: boolean;
}

const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const has = (o: unknown, k: string) => isObj(o) && Object.hasOwn(o, k);

function put(o: Obj, key: string, value: unknown): void {
  Object.defineProperty(o, key, { value, writable: true, enumerable: true, configurable: true });
}

function fromEntries(entries: Array<[string, unknown]>): Obj {
  const o: Obj = {};
  for (const [k, v] of entries) put(o, k, v);
  return o;
}

const word = fc.stringMatching(/^[a-z][a-z0-9]{0,6}$/);
const name = fc.stringMatching(/^[a-z][a-z0-9-]{0,8}[a-z0-9]$/);
const TERM_SELECTORS = ['property', 'tag', 'rel'];

function mapKey(opts: ValueOptions): fc.Arbitrary<string> {
  const odd = ['__proto__', 'constructor', 'toString', 'hasOwnProperty', 'valueOf', 'a/b', 'a.b', ...(opts.patchSafe ? [] : ['$x'])];
  return fc.oneof({ weight: 6, arbitrary: word }, { weight: 1, arbitrary: fc.constantFrom(...odd) });
}

function stringArb(schema: JsonSchema): fc.Arbitrary<string> {
  const min = schema.minLength ?? 0;
  const max = schema.maxLength ?? 12;
  if (schema.format === 'keel-link') {
    // Full and relative forms: the server stores the full one either way.
    return fc.tuple(fc.constantFrom('user', 'group', 'serviceaccount', 'location'), word, fc.boolean()).map(([k, n, full]) => (full ? `/org/acme/${k}/${n}` : `//${k}/${n}`));
  }
  const format = typeof schema.format === 'string' ? FORMATS[schema.format] : undefined;
  if (format) return fc.constantFrom(...format.examples);
  if (schema.pattern === NAME_PATTERN) return name;
  if (schema.pattern) return fc.stringMatching(new RegExp(schema.pattern)).filter((s) => s.length >= min && s.length <= max);
  return fc.string({ minLength: min, maxLength: Math.max(min, Math.min(max, 12)) });
}

function numberArb(schema: JsonSchema): fc.Arbitrary<number> {
  const lo = schema.minimum ?? -1000;
  const hi = Math.min(schema.maximum ?? lo + 1000, lo + 1000);
  if (schema.type === 'integer') return fc.integer({ min: Math.ceil(lo), max: Math.floor(hi) });
  // Quarters: fractional numbers without float noise (and never -0, which JSON cannot carry).
  return fc.integer({ min: Math.ceil(lo * 4), max: Math.floor(hi * 4) }).map((n) => (n === 0 ? 0 : n / 4));
}

// Building an arbitrary (stringMatching parses its regex) costs far more than drawing from it,
// and patch generation asks for the same ones per stored object: build each once.
const built = new WeakMap<JsonSchema, Map<string, fc.Arbitrary<unknown>>>();

/** Random valid values of `schema`. */
export function valueArb(schema: JsonSchema, opts: ValueOptions = {}): fc.Arbitrary<unknown> {
  const flavour = `${!!opts.readOnly}${!!opts.patchSafe}`;
  let bySchema = built.get(schema);
  if (!bySchema) built.set(schema, (bySchema = new Map()));
  let arb = bySchema.get(flavour);
  if (!arb) bySchema.set(flavour, (arb = buildValueArb(schema, opts)));
  return arb;
}

function buildValueArb(schema: JsonSchema, opts: ValueOptions): fc.Arbitrary<unknown> {
  if (schema.const !== undefined) return fc.constant(schema.const);
  if (schema.enum) return fc.constantFrom(...schema.enum);
  if (Array.isArray(schema.type)) {
    return fc.oneof(...schema.type.map((type) => valueArb({ ...schema, type: type as JsonSchema['type'] }, opts)));
  }
  switch (schema.type) {
    case 'string':
      return stringArb(schema);
    case 'number':
    case 'integer':
      return numberArb(schema);
    case 'boolean':
      return fc.boolean();
    case 'null':
      return fc.constant(null);
    case 'array':
      return arrayArb(schema, opts);
    case 'object':
      return objectArb(schema, opts);
    default:
      return fc.oneof(word, fc.integer({ min: -5, max: 5 }), fc.boolean());
  }
}

/** An item of a keyed array that surely carries an identity. */
function keyedItemArb(schema: JsonSchema, opts: ValueOptions): fc.Arbitrary<Obj> {
  const items = schema.items ?? {};
  const key = itemKey(schema)!;
  if (!key.unique) {
    // a query term: exactly one selector
    return fc.tuple(objectArb(items, opts), fc.constantFrom(...TERM_SELECTORS), word).map(([term, selector, id]) => {
      const out = fromEntries(Object.entries(term).filter(([k]) => !TERM_SELECTORS.includes(k)));
      put(out, selector, id);
      return out;
    });
  }
  const idSchema = items.properties?.[key.label] ?? { type: 'string' };
  return fc.tuple(objectArb(items, opts), valueArb(idSchema)).map(([item, id]) => {
    const out = fromEntries(Object.entries(item));
    put(out, key.label, id);
    return out;
  });
}

function arrayArb(schema: JsonSchema, opts: ValueOptions): fc.Arbitrary<unknown[]> {
  const maxLength = Math.min(schema.maxItems ?? 3, 3);
  const minLength = schema.minItems ?? 0;
  const key = itemKey(schema);
  if (key?.unique) return fc.uniqueArray(keyedItemArb(schema, opts), { selector: (item) => key.of(item), minLength, maxLength });
  const item = key ? keyedItemArb(schema, opts) : valueArb(schema.items ?? {}, opts);
  return fc.array(item, { minLength, maxLength });
}

function objectArb(schema: JsonSchema, opts: ValueOptions): fc.Arbitrary<Obj> {
  const model: Record<string, fc.Arbitrary<unknown>> = {};
  for (const [k, s] of Object.entries(schema.properties ?? {})) {
    if (!s.readOnly || opts.readOnly) model[k] = valueArb(s, opts);
  }
  const requiredKeys = (schema.required ?? []).filter((k) => k in model);
  const known = fc.record(model, { requiredKeys, noNullPrototype: true }) as fc.Arbitrary<Obj>;
  const extra = schema.additionalProperties;
  const values = extra === false ? undefined : typeof extra === 'object' ? valueArb(extra, opts) : schema.properties ? undefined : valueArb({}, opts);
  if (!values) return known;
  const entries = fc.array(fc.tuple(mapKey(opts), values), { maxLength: 3 });
  return fc.tuple(known, entries).map(([k, e]) => fromEntries([...Object.entries(k), ...e]));
}

/** `value` with each immutable field that `stored` has set back to the stored value. */
export function alignImmutable(value: unknown, schema: JsonSchema, stored: unknown): unknown {
  if (!isObj(value) || !isObj(stored) || schema.type !== 'object') return value;
  const out = fromEntries(Object.entries(value));
  for (const [k, s] of Object.entries(schema.properties ?? {})) {
    if (!Object.hasOwn(out, k)) continue;
    put(out, k, s['x-immutable'] && Object.hasOwn(stored, k) ? stored[k] : alignImmutable(out[k], s, stored[k]));
  }
  return out;
}

/**
 * `b` adjusted so a patch can turn `a` into it: server-owned fields as in `a` (no patch sets
 * them) and immutable fields that `a` has unchanged.
 */
export function carryOver(a: unknown, b: unknown, schema: JsonSchema): unknown {
  if (Array.isArray(b) && schema.type === 'array') {
    const key = itemKey(schema);
    const stored = (item: unknown) => (key?.unique && Array.isArray(a) ? a.find((s) => key.of(s) === key.of(item)) : undefined);
    return b.map((item) => carryOver(stored(item), item, schema.items ?? {}));
  }
  if (!isObj(b) || schema.type !== 'object') return b;
  const out = fromEntries(Object.entries(b));
  for (const [k, s] of Object.entries(schema.properties ?? {})) {
    if (s.readOnly || (s['x-immutable'] && has(a, k))) {
      if (has(a, k)) put(out, k, (a as Obj)[k]);
      else delete out[k];
    } else if (Object.hasOwn(out, k)) {
      put(out, k, carryOver(has(a, k) ? (a as Obj)[k] : undefined, out[k], s));
    }
  }
  return out;
}

type Action = { key: string; value: unknown } | { drop: string };

const set = (key: string) => (value: unknown): Action => ({ key, value });

/** Random patches that are valid for `stored`: applying one yields an object of `schema`. */
export function patchArb(schema: JsonSchema, stored: Obj, exclude: string[] = []): fc.Arbitrary<Obj> {
  const actions: Array<fc.Arbitrary<Action | undefined>> = [];
  for (const [k, s] of Object.entries(schema.properties ?? {})) {
    if (!exclude.includes(k)) actions.push(fc.option(fieldAction(k, s, stored, schema.required?.includes(k) ?? false), { nil: undefined }));
  }
  const extra = schema.additionalProperties;
  if (extra !== false && (typeof extra === 'object' || !schema.properties)) {
    const values = typeof extra === 'object' ? extra : {};
    for (const k of Object.keys(stored)) {
      if (!schema.properties?.[k] || !Object.hasOwn(schema.properties, k)) {
        actions.push(fc.option(k.startsWith('$') ? fc.constant({ drop: k }) : fieldAction(k, values, stored, false), { nil: undefined }));
      }
    }
    actions.push(
      fc.array(fc.tuple(mapKey({ patchSafe: true }), valueArb(values, { patchSafe: true })), { maxLength: 2 }).map((entries) =>
        entries.length ? { key: '', value: fromEntries(entries) } : undefined,
      ),
    );
  }
  return fc.tuple(...actions).map((chosen) => {
    const patch: Obj = {};
    const drop: string[] = [];
    for (const action of chosen) {
      if (!action) continue;
      if ('drop' in action) drop.push(action.drop);
      // key '' carries new map entries, merged in as plain fields
      else if (action.key === '') for (const [k, v] of Object.entries(action.value as Obj)) put(patch, k, v);
      else put(patch, action.key, action.value);
    }
    if (drop.length) put(patch, '$drop', drop);
    return patch;
  });
}

/** One way to change field `k` of `stored` validly. */
function fieldAction(k: string, s: JsonSchema, stored: Obj, required: boolean): fc.Arbitrary<Action> {
  const current = Object.hasOwn(stored, k) ? stored[k] : undefined;
  // server-owned: anything may be sent, it is ignored
  if (s.readOnly) return valueArb(s, { readOnly: true }).map(set(k));
  if (s['x-immutable'] && current !== undefined) return fc.constant({ key: k, value: current });
  const options: Array<fc.WeightedArbitrary<Action>> = [];
  const add = (arbitrary: fc.Arbitrary<Action>, weight = 1) => options.push({ arbitrary, weight });
  add(valueArb(s, { patchSafe: true }).map((v) => ({ key: k, value: alignImmutable(v, s, current) })));
  if (!required) {
    add(fc.constant({ key: k, value: null }));
    add(fc.constant({ drop: k }));
  }
  // Nested patches and item directives weigh more so deep levels are reached often.
  if (s.type === 'object') {
    if (isObj(current)) add(patchArb(s, current).map(set(k)), 6);
    else if (!s.required?.length) add(patchArb(s, {}).map(set(k)), 2);
  }
  if (isReplaceable(s)) add(valueArb(s).map((v) => ({ key: `$replace/${k}`, value: alignImmutable(v, s, current) })));
  if (s.type === 'array') for (const action of arrayActions(k, s, Array.isArray(current) ? current : [])) add(action, 2);
  return fc.oneof(...options);
}

function arrayActions(k: string, s: JsonSchema, current: unknown[]): Array<fc.Arbitrary<Action>> {
  const items = s.items ?? {};
  const key = itemKey(s);
  if (!key) {
    const append = fc.array(valueArb(items, { patchSafe: true }), { maxLength: 2 }).map(set(`$append/${k}`));
    if (items.type === 'object') return [append];
    const listed = fc.tuple(fc.subarray(current), fc.array(valueArb(items), { maxLength: 1 })).map(([a, b]) => [...a, ...b]);
    return [append, listed.map(set(`$drop/${k}`)), listed.map(set(`$retain/${k}`))];
  }
  const ids = current.map((item) => key.of(item)).filter((id) => id !== undefined);
  const listed = fc.tuple(fc.subarray(ids), fc.array(word, { maxLength: 1 })).map(([a, b]) => [...a, ...b]);
  const fresh = fc
    .uniqueArray(keyedItemArb(s, { patchSafe: true }), { selector: (item) => key.of(item), maxLength: 2 })
    .map((list) => list.filter((item) => !ids.includes(key.of(item)!)));
  const partials = current.filter(isObj).map((item) => {
    const selector = key.unique ? key.label : TERM_SELECTORS.find((sel) => typeof item[sel] === 'string')!;
    return patchArb(items, item, key.unique ? [key.label] : TERM_SELECTORS).map((partial) => {
      put(partial, selector, item[selector]);
      return partial;
    });
  });
  const patched = fc.tuple(fc.subarray(partials.length ? partials : []).chain((chosen) => fc.tuple(...chosen)), fresh);
  return [
    listed.map(set(`$drop/${k}`)),
    listed.map(set(`$retain/${k}`)),
    patched.map(([p, f]) => ({ key: `$patch/${k}`, value: [...p, ...f] })),
    fresh.map(set(`$append/${k}`)),
  ];
}
