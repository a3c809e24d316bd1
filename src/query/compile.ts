// Compiles a query to SQL over `resources r`: a WHERE fragment (terms, then the keyset position)
// and an ORDER BY, with the same semantics as evaluate.ts and sort.ts.
import type { SqlParams } from '../store/sql.js';
import { decodeCursor, invalidCursor } from './cursor.js';
import { DIALECTS, type Slot, type SqlDialect } from './dialects.js';
import { checkedSegments, COLUMNS, hiddenTopLevel } from './paths.js';
import type { Position } from './sort.js';
import { sortOf, type Op, type PropertyTerm, type Query, type RelTerm, type TagTerm, type Term } from './types.js';
import { operandOf, type Operand } from './values.js';

export interface CompileOptions {
  /** The org queried. Tag terms look it up in resource_tags uncorrelated, so SQLite can drive from the tag index. */
  org: string;
  /** A cursorOf() value: continue after that item. */
  after?: string;
  /**
   * PostgreSQL: let a tag equality that every match must satisfy drive the scan, as a join from the
   * tag index. Tested as a semi-join instead, PostgreSQL merges it against a scan of the name index,
   * which reads 100 rows for each match of a 1% tag.
   */
  drive?: boolean;
}

export interface CompiledQuery {
  /** A two-valued condition over `resources r`; its parameters were added to `params` in text order. */
  where: string;
  /** Holds no parameters, so it may follow anything. */
  orderBy: string;
  /** A join that restricts `r` (PostgreSQL only: its placeholders are numbered, so these may precede the scope's in the text). */
  join?: string;
}

/**
 * The caller runs `... FROM resources r WHERE r.org = ? AND r.kind = ? AND (<where>) ORDER BY <orderBy> LIMIT ?`,
 * adding org and kind to `params` before, and the limit after, calling this.
 */
export function compileQuery(query: Query, params: SqlParams, options: CompileOptions): CompiledQuery {
  const position = options.after === undefined ? undefined : decodeCursor(query, options.after);
  const c = new Compiler(query, params, options.org);
  const driver = options.drive && params.dialect === 'postgres' ? c.driver() : undefined;
  const terms = c.terms(driver);
  const where = position ? `(${terms}) AND (${c.after(position)})` : terms;
  return { where, orderBy: c.orderBy(), ...(driver ? { join: c.join(driver) } : {}) };
}

class Compiler {
  private readonly d: SqlDialect;
  constructor(
    private readonly query: Query,
    private readonly params: SqlParams,
    private readonly org: string,
  ) {
    this.d = DIALECTS[params.dialect];
  }

  private p(value: unknown): string {
    return this.params.add(value);
  }

  /** A tag equality that every match satisfies: each item has one value per tag, so it joins each item at most once. */
  driver(): TagTerm | undefined {
    const { match, terms } = this.query.spec;
    if (match === 'none' || (match === 'any' && terms.length !== 1)) return undefined;
    return terms.find((t): t is TagTerm => 'tag' in t && t.op === '=' && t.tag !== '*');
  }

  join(term: TagTerm): string {
    return `JOIN (${this.tagRows(term.tag)} AND ${this.text('t.value', '=', operandOf(term.value))}) drive ON drive.name = r.name AND drive.gvc = r.gvc`;
  }

  /** The terms but `skip` (a driver, applied as a join). */
  terms(skip?: Term): string {
    const { match } = this.query.spec;
    const terms = this.query.spec.terms.filter((t) => t !== skip);
    if (terms.length === 0) return 'TRUE';
    // `none` as a conjunction of negations lets PostgreSQL turn NOT IN/NOT EXISTS into anti-joins.
    if (match === 'none') return terms.map((t) => `NOT (${this.term(t)})`).join(' AND ');
    return terms.map((t) => `(${this.term(t)})`).join(match === 'all' ? ' AND ' : ' OR ');
  }

  /** Every term compiles to a two-valued condition, so NOT and `none` mean what they say. */
  private term(term: Term): string {
    if ('tag' in term) return this.tag(term);
    if ('rel' in term) return this.rel(term);
    return this.property(term);
  }

  // Index-backed: (org, kind, key, value) is a range of resource_tags_lookup, whose (name, gvc) then
  // probe the resources primary key. Uncorrelated, so SQLite evaluates it once; PostgreSQL makes a semi-join.
  private tag(term: TagTerm): string {
    const subquery = (condition: () => string) => `(r.name, r.gvc) IN (${this.tagRows(term.tag)}${condition()})`;
    if (term.op === 'exists') return subquery(() => '');
    if (term.op === '!exists') return `NOT ${subquery(() => '')}`;
    const operand = operandOf(term.value);
    return subquery(() => ` AND ${this.text('t.value', term.op, operand)}`);
  }

  /** (name, gvc) of the items of the queried kind that have tag `key` ('*': any tag), open for more conditions on t. */
  private tagRows(key: string): string {
    const sql = `SELECT t.name, t.gvc FROM resource_tags t WHERE t.org = ${this.p(this.org)} AND t.kind = ${this.p(this.query.kind)}`;
    return key === '*' ? sql : `${sql} AND t.key = ${this.p(key)}`;
  }

  private rel(term: RelTerm): string {
    if (term.rel === 'gvc') {
      // Org-scoped kinds store gvc ''; kept sargable on the primary key (org, kind, gvc, name).
      if (term.op === 'exists') return `r.gvc <> ''`;
      if (term.op === '!exists') return `r.gvc = ''`;
      return `r.gvc <> '' AND ${this.text('r.gvc', term.op, operandOf(term.value))}`;
    }
    const field = `${term.rel}Link`;
    const link = `COALESCE(${this.d.path([field]).str}, ${this.d.path(['spec', field]).str})`;
    if (term.op === 'exists') return `${link} IS NOT NULL`;
    if (term.op === '!exists') return `${link} IS NULL`;
    const operand = operandOf(term.value);
    const target = operand.text.includes('/') ? link : this.d.lastSegment(link);
    return `COALESCE(${this.text(target, term.op, operand)}, FALSE)`;
  }

  /** Tags and rels (see evaluate.ts matchesText). */
  private text(expr: string, op: Op, o: Operand): string {
    if (op === '=' || op === '!=') return `${expr} ${op === '=' ? '=' : '<>'} ${this.p(o.text)}`;
    if (op === '~') return this.d.contains(expr, this.p(o.lower));
    const d = this.d;
    if (o.textNumber === undefined) return `${d.bytewise(expr)} ${op} ${this.p(o.text)}`;
    return `CASE WHEN ${d.isNumeric(expr)} THEN ${d.asNumber(expr)} ${op} ${d.asNumber(this.p(o.text))} ELSE ${d.bytewise(expr)} ${op} ${this.p(o.text)} END`;
  }

  private property(term: PropertyTerm): string {
    if (term.property === '*') {
      const { from, key, slot } = this.d.each;
      const skip = hiddenTopLevel(this.query.hidden);
      const shown = skip.length ? `${key} NOT IN (${skip.map((k) => this.p(k)).join(', ')}) AND ` : '';
      if (term.op === '!exists') return `NOT EXISTS (SELECT 1 FROM ${from} WHERE ${shown}${slot.present})`;
      return `EXISTS (SELECT 1 FROM ${from} WHERE ${shown}${this.value(slot, term)})`;
    }
    return this.value(this.slot(term.property), term);
  }

  private slot(property: string): Slot {
    const column = COLUMNS.get(property);
    return column ? this.d.column(column.column, column.type) : this.d.path(checkedSegments(property));
  }

  /** Properties (see evaluate.ts matchesValue). */
  private value(slot: Slot, term: Term): string {
    if (term.op === 'exists') return slot.present;
    if (term.op === '!exists') return `NOT (${slot.present})`;
    const o = operandOf(term.value);
    if (term.op === '~') return slot.str ? this.twoValued(slot, this.d.contains(slot.str, this.p(o.lower))) : 'FALSE';
    if (term.op === '!=') return `${slot.present} AND NOT (${this.compare(slot, '=', o)})`;
    return this.compare(slot, term.op, o);
  }

  private compare(slot: Slot, op: Op, o: Operand): string {
    const parts: string[] = [];
    if (slot.num && o.number !== undefined) parts.push(`${slot.num} ${op} ${this.d.numberParam(this.p(o.number))}`);
    if (slot.bool && o.boolean !== undefined) parts.push(`${slot.bool} ${op} ${this.d.booleanParam(this.p(this.d.booleanValue(o.boolean)))}`);
    if (slot.str && op === '=') parts.push(`${slot.str} = ${this.p(o.text)}`);
    else if (slot.str && o.isString) parts.push(`${this.d.bytewise(slot.str)} ${op} ${this.p(o.text)}`);
    if (parts.length === 0) return 'FALSE';
    return this.twoValued(slot, parts.join(' OR '));
  }

  private twoValued(slot: Slot, condition: string): string {
    return slot.nullable ? `COALESCE(${condition}, FALSE)` : condition;
  }

  /** The sort key as SQL: a real column, or (rank, num, str) of a JSON value as in sort.ts. */
  private sortKey(): { column: string; type: 'string' | 'number' } | { rank: string; num: string; str: string } {
    const { by } = sortOf(this.query);
    const column = COLUMNS.get(by);
    if (column) return { column: column.type === 'string' ? this.d.bytewise(column.column) : column.column, type: column.type };
    const slot = this.d.path(checkedSegments(by));
    return {
      rank: `CASE WHEN ${slot.num} IS NOT NULL THEN 2 WHEN ${slot.bool} IS NOT NULL THEN 1 WHEN ${slot.str} IS NOT NULL THEN 3 ELSE 0 END`,
      num: `COALESCE(${slot.num}, CASE ${slot.bool} WHEN TRUE THEN 1 WHEN FALSE THEN 0 END)`,
      str: this.d.bytewise(slot.str!),
    };
  }

  private byName(): boolean {
    return sortOf(this.query).by === 'name';
  }

  orderBy(): string {
    const dir = sortOf(this.query).order === 'desc' ? ' DESC' : '';
    const key = this.sortKey();
    // Sorting by name needs no extra key: name is the first tie-breaker anyway.
    const keys = 'column' in key ? (this.byName() ? [] : [key.column]) : [key.rank, key.num, key.str];
    return [...keys, 'r.name', 'r.gvc'].map((k) => k + dir).join(', ');
  }

  /** Rows strictly after `position` in the order of orderBy(). */
  after(position: Position): string {
    const gt = sortOf(this.query).order === 'desc' ? '<' : '>';
    const key = this.sortKey();
    const tail = () => `(r.name, r.gvc) ${gt} (${this.p(position.name)}, ${this.p(position.gvc)})`;
    if ('column' in key) {
      if (this.byName()) return tail();
      const value = key.type === 'number' ? position.key.num : position.key.str;
      if (value === null || position.key.rank !== (key.type === 'number' ? 2 : 3)) throw invalidCursor();
      const param = key.type === 'number' ? this.d.numberParam(this.p(value)) : this.p(value);
      return `(${key.column}, r.name, r.gvc) ${gt} (${param}, ${this.p(position.name)}, ${this.p(position.gvc)})`;
    }
    const { rank, num, str } = position.key;
    const within = () => {
      if (rank === 0) return tail();
      const [expr, value] = rank === 3 ? [key.str, str] : [key.num, num];
      const param = () => (rank === 3 ? this.p(value) : this.d.numberParam(this.p(value)));
      return `${expr} ${gt} ${param()} OR (${expr} = ${param()} AND ${tail()})`;
    };
    return `${key.rank} ${gt} ${rank} OR (${key.rank} = ${rank} AND (${within()}))`;
  }
}
