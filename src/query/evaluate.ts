// In-memory evaluation (group memberQuery, policy targetQuery), with exactly the semantics of compile.ts.
import { checkedSegments, hiddenTopLevel, isObject, relLink, topLevelValues, valueAt } from './paths.js';
import type { Op, Query, QueryPlace, Term } from './types.js';
import { compareStrings, isNumericString, lastSegment, lowerAscii, operandOf, type Operand } from './values.js';

export function matchesQuery(query: Query, item: Record<string, unknown>, place: QueryPlace = {}): boolean {
  const { match, terms } = query.spec;
  const hit = (term: Term) => matchesTerm(query, term, item, place);
  if (match === 'all') return terms.every(hit);
  if (match === 'any') return terms.length === 0 || terms.some(hit);
  return !terms.some(hit);
}

function matchesTerm(query: Query, term: Term, item: Record<string, unknown>, place: QueryPlace): boolean {
  if ('tag' in term) {
    const tags = isObject(item.tags) ? item.tags : {};
    const values = term.tag === '*' ? Object.values(tags) : Object.hasOwn(tags, term.tag) ? [tags[term.tag]] : [];
    // resource_tags stores String(value) of each tag with a value (rows.ts tagRows); compare what it stores.
    return someMatches(values.filter(present).map(String), term, matchesText);
  }
  if ('rel' in term) {
    if (term.rel === 'gvc') return someMatches(place.gvc ? [place.gvc] : [], term, matchesText);
    const link = relLink(item, term.rel);
    // A value with a slash is compared with the whole link, otherwise with the linked item's name.
    return someMatches(link === undefined ? [] : [link], term, (v, op, o) =>
      matchesText(o.text.includes('/') ? v : lastSegment(v), op, o),
    );
  }
  const values = term.property === '*' ? topLevelValues(item, hiddenTopLevel(query.hidden)) : [valueAt(item, checkedSegments(term.property))];
  return someMatches(values.filter(present), term, matchesValue);
}

/** Missing and null are the same: absent. */
function present(v: unknown): boolean {
  return v !== undefined && v !== null;
}

/** A term matches when one of the candidate values satisfies it; `!exists` when there is none. */
function someMatches<T>(values: T[], term: Term, test: (v: T, op: Op, o: Operand) => boolean): boolean {
  if (term.op === '!exists') return values.length === 0;
  if (term.op === 'exists') return values.length > 0;
  const operand = operandOfTerm(term);
  return values.some((v) => test(v, term.op, operand));
}

/** A term's operand, worked out once per term (lists decide a term for every item of a scope). */
function operandOfTerm(term: Term): Operand {
  let operand = operands.get(term);
  if (operand === undefined) {
    operand = operandOf(term.value);
    operands.set(term, operand);
  }
  return operand;
}
const operands = new WeakMap<Term, Operand>();

/** Tags and rels: strings; ordering ops compare numerically when both sides are numeric strings. */
export function matchesText(stored: string, op: Op, o: Operand): boolean {
  switch (op) {
    case '=':
      return stored === o.text;
    case '!=':
      return stored !== o.text;
    case '~':
      return lowerAscii(stored).includes(o.lower);
    default: {
      const n = o.textNumber !== undefined && isNumericString(stored) ? Number(stored) - o.textNumber : compareStrings(stored, o.text);
      return ordered(n, op);
    }
  }
}

/**
 * Properties compare by the stored value's type; a mismatched type never equals or orders.
 * A stored string equals a number or boolean term by its text (the CLI turns "3" and "true" into
 * a number and a boolean), but only a string term orders it.
 */
export function matchesValue(stored: unknown, op: Op, o: Operand): boolean {
  if (op === '~') return typeof stored === 'string' && lowerAscii(stored).includes(o.lower);
  const equality = op === '=' || op === '!=';
  const c = compareValue(stored, o, equality);
  if (op === '=') return c === 0;
  if (op === '!=') return c !== 0;
  return c !== undefined && ordered(c, op);
}

function compareValue(stored: unknown, o: Operand, equality: boolean): number | undefined {
  if (typeof stored === 'number') return o.number === undefined ? undefined : Math.sign(stored - o.number);
  if (typeof stored === 'boolean') return o.boolean === undefined ? undefined : Number(stored) - Number(o.boolean);
  if (typeof stored === 'string') return equality || o.isString ? compareStrings(stored, o.text) : undefined;
  return undefined;
}

function ordered(c: number, op: Op): boolean {
  switch (op) {
    case '>':
      return c > 0;
    case '>=':
      return c >= 0;
    case '<':
      return c < 0;
    case '<=':
      return c <= 0;
    default:
      throw new Error(`not an ordering op: ${op}`);
  }
}
