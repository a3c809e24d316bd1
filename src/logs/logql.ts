// The part of LogQL that Keel evaluates: a stream selector over labels (=, !=, =~, !~) followed by
// line filters (|=, !=, |~, !~). Regular expressions are RE2's, as Loki's are, and run on re2js (a
// port of RE2): matching takes time linear in the line and in the pattern's compiled size, whatever
// the pattern. A pattern is also bounded before it is compiled (its length and an upper bound on its
// compiled size), so neither compiling nor matching one line can hold the request thread for long;
// the lines of a read are matched in chunks under a budget (see match.ts). Label matchers are
// anchored; line filters search.
import { RE2JS } from 're2js';
import { ApiError } from '../errors.js';
import { unstorable, UNSTORABLE_TEXT } from '../storable.js';
import { LOG_LABELS, type LogFilter, type LogLabel } from '../store/types.js';
import { programBound } from './regex-size.js';

export const MAX_QUERY_LENGTH = 4096;
const MAX_MATCHERS = 32;
const MAX_FILTERS = 32;
/** Characters of one regular expression. */
export const MAX_PATTERN_LENGTH = 1024;
/** Compiled instructions of all of a query's regular expressions together (RE2's "program size"). */
export const MAX_PROGRAM_SIZE = 1000;
/** Regular expressions in one query: each keeps up to 8 MB of automaton states (RE2's default) while the query runs. */
export const MAX_REGEXES = 4;

export interface Matcher {
  label: string;
  op: '=' | '!=' | '=~' | '!~';
  value: string;
  test(value: string): boolean;
}

export interface LineFilter {
  op: '|=' | '!=' | '|~' | '!~';
  value: string;
  test(line: string): boolean;
}

export interface LogQuery {
  matchers: Matcher[];
  filters: LineFilter[];
  /** The compiled size of the query's regular expressions: what matching one character of a line costs, at most. */
  cost: number;
}

const bad = (message: string) => ApiError.badRequest(`parse error: ${message}`, [{ path: 'query', message }]);

/** Parses a LogQL log query; anything else (a metric query, a parser stage) is a 400 naming it. */
export function parseLogQL(text: string): LogQuery {
  if (typeof text !== 'string' || text.trim() === '') throw bad('the query is empty; give a stream selector such as {gvc="g", workload="w"}');
  if (text.length > MAX_QUERY_LENGTH) throw bad(`the query is longer than ${MAX_QUERY_LENGTH} characters`);
  const lexer = new Lexer(text);
  const compiled = new Compiler();
  if (/^\s*[a-z_]+\s*\(/i.test(text)) throw bad('metric queries are not supported; Keel answers log queries (a stream selector and line filters)');
  lexer.expect('{');
  const matchers: Matcher[] = [];
  while (!lexer.take('}')) {
    if (matchers.length > 0) lexer.expect(',');
    const label = lexer.ident();
    const op = lexer.op(['=~', '!~', '!=', '=']) as Matcher['op'];
    const value = lexer.string();
    matchers.push(matcher(label, op, value, compiled));
    if (matchers.length > MAX_MATCHERS) throw bad(`more than ${MAX_MATCHERS} label matchers`);
  }
  if (!matchers.some((m) => (m.op === '=' || m.op === '=~') && !m.test(''))) {
    throw bad('queries need at least one = or =~ label matcher that does not match the empty value (for example {gvc="g"})');
  }
  const filters: LineFilter[] = [];
  while (!lexer.done()) {
    if (lexer.peek('|') && !lexer.peek('|=') && !lexer.peek('|~')) throw bad(`unsupported pipeline stage at '${lexer.rest(20)}': Keel evaluates line filters (|= != |~ !~) only`);
    const op = lexer.op(['|=', '!=', '|~', '!~']) as LineFilter['op'];
    filters.push(lineFilter(op, lexer.string(), compiled));
    if (filters.length > MAX_FILTERS) throw bad(`more than ${MAX_FILTERS} line filters`);
  }
  return { matchers, filters, cost: compiled.size };
}

function matcher(label: string, op: Matcher['op'], value: string, compiled: Compiler): Matcher {
  if (op === '=') return { label, op, value, test: (v) => v === value };
  if (op === '!=') return { label, op, value, test: (v) => v !== value };
  const re = compiled.regex(value);
  return { label, op, value, test: op === '=~' ? (v) => re.testExact(v) : (v) => !re.testExact(v) };
}

function lineFilter(op: LineFilter['op'], value: string, compiled: Compiler): LineFilter {
  if (op === '|=') return { op, value, test: (line) => line.includes(value) };
  if (op === '!=') return { op, value, test: (line) => !line.includes(value) };
  const re = compiled.regex(value);
  return { op, value, test: op === '|~' ? (line) => re.test(line) : (line) => !re.test(line) };
}

/** Compiles a query's patterns, refusing one that is too long or would compile too large before compiling it. */
class Compiler {
  size = 0;
  private count = 0;
  regex(pattern: string): RE2JS {
    if (++this.count > MAX_REGEXES) throw bad(`more than ${MAX_REGEXES} regular expressions (=~, !~, |~); combine them with | or use |= filters`);
    if (pattern.length > MAX_PATTERN_LENGTH) {
      throw bad(`a regular expression is longer than ${MAX_PATTERN_LENGTH} characters`);
    }
    const bound = programBound(pattern);
    if (this.size + bound > MAX_PROGRAM_SIZE) {
      throw bad(`the query's regular expressions are too large (they would compile to about ${this.size + bound} instructions, more than ${MAX_PROGRAM_SIZE}); use fewer or smaller repetitions and alternatives`);
    }
    let re: RE2JS;
    try {
      re = RE2JS.compile(pattern);
    } catch (err) {
      throw bad(`invalid regular expression ${JSON.stringify(pattern.slice(0, 80))}: ${(err as Error).message.replace(/^error parsing regexp: /, '')} (RE2 syntax: no backreferences or lookaround)`);
    }
    this.size += re.programSize();
    return re;
  }
}

/** Whether a line with these labels (a missing label reads as '') matches the query. */
export function matches(query: LogQuery, labels: Partial<Record<string, string>>, line: string): boolean {
  for (const m of query.matchers) if (!m.test(labels[m.label] ?? '')) return false;
  for (const f of query.filters) if (!f.test(line)) return false;
  return true;
}

/** True when a matcher on a label no line has rules out every line (Keel's lines carry LOG_LABELS only). */
export function matchesNothing(query: LogQuery): boolean {
  return query.matchers.some((m) => !(LOG_LABELS as readonly string[]).includes(m.label) && !m.test(''));
}

/** The parts of the query the store evaluates in SQL (the rest is checked on each line read). */
export function pushdown(query: LogQuery): Pick<LogFilter, 'labels' | 'contains'> {
  return {
    labels: query.matchers
      .filter((m) => (m.op === '=' || m.op === '!=') && (LOG_LABELS as readonly string[]).includes(m.label))
      .map((m) => ({ label: m.label as LogLabel, op: m.op as '=' | '!=', value: m.value })),
    contains: query.filters.filter((f) => f.op === '|=' || f.op === '!=').map((f) => ({ text: f.value, negate: f.op === '!=' })),
  };
}

/** Whether every part of the query is in its pushdown (so each line the store returns matches). */
export function fullyPushed(query: LogQuery): boolean {
  return query.matchers.every((m) => m.op === '=' || m.op === '!=') && query.filters.every((f) => f.op === '|=' || f.op === '!=');
}

class Lexer {
  private at = 0;
  constructor(private readonly text: string) {}

  private skip(): void {
    while (this.at < this.text.length && /\s/.test(this.text[this.at])) this.at++;
  }
  done(): boolean {
    this.skip();
    return this.at >= this.text.length;
  }
  rest(n: number): string {
    return this.text.slice(this.at, this.at + n);
  }
  peek(token: string): boolean {
    this.skip();
    return this.text.startsWith(token, this.at);
  }
  take(token: string): boolean {
    if (!this.peek(token)) return false;
    this.at += token.length;
    return true;
  }
  expect(token: string): void {
    if (this.take(token)) return;
    throw bad(this.done() ? `unexpected end of query, expected '${token}'` : `expected '${token}' at '${this.rest(20)}'`);
  }
  op(ops: string[]): string {
    for (const op of ops) if (this.take(op)) return op;
    throw bad(this.done() ? `unexpected end of query, expected one of ${ops.join(' ')}` : `expected one of ${ops.join(' ')} at '${this.rest(20)}'`);
  }
  ident(): string {
    this.skip();
    const m = /^[A-Za-z_][A-Za-z0-9_]*/.exec(this.text.slice(this.at));
    if (!m) throw bad(this.done() ? 'unexpected end of query, expected a label name' : `expected a label name at '${this.rest(20)}'`);
    this.at += m[0].length;
    return m[0];
  }
  /** A "double-quoted" string (JSON escapes) or a `raw` one, holding nothing a backend cannot compare. */
  string(): string {
    const value = this.literal();
    if (unstorable(value)) throw bad(`strings must not contain ${UNSTORABLE_TEXT}`);
    return value;
  }
  private literal(): string {
    this.skip();
    const quote = this.text[this.at];
    if (quote === '`') {
      const end = this.text.indexOf('`', this.at + 1);
      if (end < 0) throw bad('unterminated `string`');
      const value = this.text.slice(this.at + 1, end);
      this.at = end + 1;
      return value;
    }
    if (quote !== '"') throw bad(this.done() ? 'unexpected end of query, expected a "string"' : `expected a "string" at '${this.rest(20)}'`);
    let end = this.at + 1;
    while (end < this.text.length && this.text[end] !== '"') end += this.text[end] === '\\' ? 2 : 1;
    if (end >= this.text.length) throw bad('unterminated "string"');
    const literal = this.text.slice(this.at, end + 1);
    this.at = end + 1;
    try {
      return JSON.parse(literal) as string;
    } catch {
      throw bad(`invalid string ${literal.slice(0, 40)}`);
    }
  }
}
