// Validates and normalizes a query body (seed 2.3, api-semantics §8.1).
import { ApiError, type FieldError } from '../errors.js';
import { hiddenPathAt, pathSegments, isObject, validRel } from './paths.js';
import { OPS, type Match, type Op, type Query, type QueryKind, type Sort, type Term, type TermValue } from './types.js';

const TOP_FIELDS = new Set(['kind', 'fetch', 'context', 'spec']);
const SPEC_FIELDS = new Set(['match', 'terms', 'sort']);
const TERM_FIELDS = new Set(['op', 'property', 'tag', 'rel', 'value']);
const SORT_FIELDS = new Set(['by', 'order']);
const MATCHES: readonly string[] = ['all', 'any', 'none'];
const MAX_TERMS = 100;
const MAX_TAG_LENGTH = 256;
const MAX_VALUE_LENGTH = 4096;

/**
 * The query a body asks for on `target`'s kind. An absent, null, empty-string or `{}` body matches
 * everything (the CLI sends an empty form-encoded body for a query without terms). `kind` in the body
 * must name the URL's kind; the literal "string" (sent by some clients) counts as absent. `context`
 * is ignored. A term or sort that meets one of the kind's hidden paths is refused (see paths.ts).
 */
export function parseQuery(body: unknown, target: QueryKind): Query {
  const { kind } = target;
  const errors: FieldError[] = [];
  const fail = (path: string, message: string) => errors.push({ path, message });
  const query: Query = { kind, fetch: 'items', spec: { match: 'all', terms: [] } };
  if (target.hidden?.length) query.hidden = target.hidden;

  if (body === undefined || body === null || (typeof body === 'string' && body.trim() === '')) return query;
  if (!isObject(body)) throw ApiError.badRequest('the query must be a JSON object', [{ path: '', message: 'must be an object' }]);

  unknownFields(body, TOP_FIELDS, '', fail);
  if (body.kind !== undefined && body.kind !== null && body.kind !== 'string' && body.kind !== kind) {
    fail('kind', `must be ${JSON.stringify(kind)}, the kind in the path`);
  }
  if (body.fetch !== undefined && body.fetch !== null) {
    if (body.fetch === 'items' || body.fetch === 'links') query.fetch = body.fetch;
    else fail('fetch', 'must be "items" or "links"');
  }
  const spec = body.spec;
  if (spec !== undefined && spec !== null) {
    if (!isObject(spec)) fail('spec', 'must be an object');
    else parseSpec(spec, query, fail);
  }
  if (errors.length > 0) throw ApiError.badRequest(`invalid query: ${errors[0].path}: ${errors[0].message}`, errors);
  return query;
}

type Fail = (path: string, message: string) => void;

function unknownFields(obj: Record<string, unknown>, allowed: Set<string>, prefix: string, fail: Fail): void {
  for (const key of Object.keys(obj)) {
    if (!allowed.has(key)) fail(prefix + key, 'is not a known field');
  }
}

function parseSpec(spec: Record<string, unknown>, query: Query, fail: Fail): void {
  unknownFields(spec, SPEC_FIELDS, 'spec.', fail);
  if (spec.match !== undefined && spec.match !== null) {
    if (typeof spec.match === 'string' && MATCHES.includes(spec.match)) query.spec.match = spec.match as Match;
    else fail('spec.match', 'must be one of all, any, none');
  }
  if (spec.terms !== undefined && spec.terms !== null) {
    if (!Array.isArray(spec.terms)) fail('spec.terms', 'must be an array');
    else if (spec.terms.length > MAX_TERMS) fail('spec.terms', `must have at most ${MAX_TERMS} terms`);
    else {
      spec.terms.forEach((raw, i) => {
        const term = parseTerm(raw, `spec.terms[${i}]`, query, fail);
        if (term) query.spec.terms.push(term);
      });
    }
  }
  if (spec.sort !== undefined && spec.sort !== null) {
    const sort = parseSort(spec.sort, query, fail);
    if (sort) query.spec.sort = sort;
  }
}

/** Fails when reading any of `reads` (paths as segments) would look at a hidden field. */
function refuseHidden(query: Query, reads: string[][], path: string, fail: Fail): boolean {
  for (const segments of reads) {
    const hidden = hiddenPathAt(segments, query.hidden);
    if (hidden !== undefined) {
      fail(path, `cannot be used: ${query.kind} '${hidden}' is not shown by reads, so queries cannot look at it`);
      return true;
    }
  }
  return false;
}

/** The stored paths a term reads (`*` reads none by name: it skips hidden fields itself). */
function readsOf(term: Term): string[][] {
  if ('tag' in term) return [term.tag === '*' ? ['tags'] : ['tags', term.tag]];
  if ('rel' in term) return term.rel === 'gvc' ? [] : [[`${term.rel}Link`], ['spec', `${term.rel}Link`]];
  return term.property === '*' ? [] : [term.property.split('.')];
}

function parseTerm(raw: unknown, path: string, query: Query, fail: Fail): Term | undefined {
  if (!isObject(raw)) {
    fail(path, 'must be an object');
    return undefined;
  }
  let ok = true;
  const bad: Fail = (at, message) => {
    ok = false;
    fail(at, message);
  };
  unknownFields(raw, TERM_FIELDS, `${path}.`, bad);

  let op: Op = '=';
  if (raw.op !== undefined && raw.op !== null) {
    if ((OPS as readonly unknown[]).includes(raw.op)) op = raw.op as Op;
    else bad(`${path}.op`, `must be one of ${OPS.join(' ')}`);
  }

  const targets = (['property', 'tag', 'rel'] as const).filter((t) => raw[t] !== undefined && raw[t] !== null);
  let target: Term | undefined;
  if (targets.length !== 1) {
    bad(path, 'must have exactly one of property, tag, rel');
  } else {
    const field = targets[0];
    const name = raw[field];
    if (typeof name !== 'string' || name === '') bad(`${path}.${field}`, 'must be a non-empty string');
    else if (field === 'property' && name !== '*' && !pathSegments(name)) {
      bad(`${path}.property`, 'must be a dotted path of [A-Za-z0-9_-] segments, at most 10 deep and 256 characters');
    } else if (field === 'tag' && name.length > MAX_TAG_LENGTH) bad(`${path}.tag`, `must be at most ${MAX_TAG_LENGTH} characters`);
    else if (field === 'rel' && !validRel(name)) bad(`${path}.rel`, 'must be a relation name of [A-Za-z0-9_-], at most 64 characters');
    else target = field === 'property' ? { op, property: name } : field === 'tag' ? { op, tag: name } : { op, rel: name };
  }

  let value: TermValue | undefined;
  const v = raw.value;
  if (v !== undefined && v !== null) {
    if (typeof v === 'string' && v.length > MAX_VALUE_LENGTH) bad(`${path}.value`, `must be at most ${MAX_VALUE_LENGTH} characters`);
    else if (typeof v === 'string' || typeof v === 'boolean' || (typeof v === 'number' && Number.isFinite(v))) value = v;
    else bad(`${path}.value`, 'must be a string, number or boolean');
  } else if (op !== 'exists' && op !== '!exists') {
    bad(`${path}.value`, `is required for op ${op}`);
  }

  if (!target || !ok) return undefined;
  if (refuseHidden(query, readsOf(target), `${path}.${targets[0]}`, fail)) return undefined;
  if (value !== undefined) target.value = value;
  return target;
}

function parseSort(raw: unknown, query: Query, fail: Fail): Sort | undefined {
  if (!isObject(raw)) {
    fail('spec.sort', 'must be an object');
    return undefined;
  }
  unknownFields(raw, SORT_FIELDS, 'spec.sort.', fail);
  const by = raw.by;
  const order = raw.order ?? 'asc';
  let ok = true;
  if (typeof by !== 'string' || !pathSegments(by)) {
    fail('spec.sort.by', 'must be a dotted property path of [A-Za-z0-9_-] segments, at most 10 deep');
    ok = false;
  } else if (refuseHidden(query, [by.split('.')], 'spec.sort.by', fail)) {
    ok = false;
  }
  if (order !== 'asc' && order !== 'desc') {
    fail('spec.sort.order', 'must be "asc" or "desc"');
    ok = false;
  }
  return ok ? { by: by as string, order: order as Sort['order'] } : undefined;
}
