// The SQL that differs between SQLite and PostgreSQL. Path segments are inlined; they were checked
// against [A-Za-z0-9_-] (paths.ts), so they cannot break out of the quotes.
import type { Dialect } from '../store/sql.js';
import { NUMERIC_MAX_LENGTH, NUMERIC_PATTERN } from './values.js';

/**
 * One stored value as SQL sees it: `num`, `bool` and `str` are NULL unless the value has that type
 * (a missing entry: never of that type); `present` is two-valued (missing and JSON null are absent).
 */
export interface Slot {
  present: string;
  num?: string;
  bool?: string;
  str?: string;
  /** Comparisons may yield NULL and need COALESCE to stay two-valued (for NOT and `none`). */
  nullable: boolean;
}

export interface SqlDialect {
  /** The value at a path of r.data. */
  path(segments: string[]): Slot;
  /** A FROM item over r.data's top-level members, aliased j: a member's key and its slot. */
  each: { from: string; key: string; slot: Slot };
  column(column: string, type: 'string' | 'number'): Slot;
  /** A text compared bytewise (UTF-8 order), whatever the column's collation; equality needs no such help. */
  bytewise(text: string): string;
  numberParam(placeholder: string): string;
  booleanParam(placeholder: string): string;
  booleanValue(b: boolean): unknown;
  /** Case-insensitive (ASCII) substring test; the placeholder holds the lower-cased needle. */
  contains(text: string, placeholder: string): string;
  /** Whether a text is a numeric string in the sense of values.ts isNumericString. */
  isNumeric(text: string): string;
  /** A text (checked numeric) or text parameter as a number. */
  asNumber(text: string): string;
  /** The part of a link after its last slash. */
  lastSegment(text: string): string;
}

// The common columns are NOT NULL, so their comparisons are two-valued already.
function columnSlot(column: string, type: 'string' | 'number'): Slot {
  return type === 'string' ? { present: 'TRUE', str: column, nullable: false } : { present: 'TRUE', num: column, nullable: false };
}

function sqliteSlot(type: string, value: string): Slot {
  return {
    present: `COALESCE(${type}, 'null') <> 'null'`,
    num: `CASE WHEN ${type} IN ('integer', 'real') THEN ${value} END`,
    bool: `CASE WHEN ${type} IN ('true', 'false') THEN ${value} END`,
    str: `CASE WHEN ${type} = 'text' THEN ${value} END`,
    nullable: true,
  };
}

const sqlite: SqlDialect = {
  path(segments) {
    const path = `'$.${segments.map((s) => `"${s}"`).join('.')}'`;
    return sqliteSlot(`json_type(r.data, ${path})`, `json_extract(r.data, ${path})`);
  },
  // json_each's atom is the SQL value of a scalar (1/0 for true/false, like json_extract).
  each: { from: 'json_each(r.data) j', key: 'j.key', slot: sqliteSlot('j.type', 'j.atom') },
  column: columnSlot,
  // Text without a declared collation compares with BINARY.
  bytewise: (text) => text,
  numberParam: (p) => p,
  booleanParam: (p) => p,
  booleanValue: (b) => (b ? 1 : 0),
  // Without ICU, SQLite's lower() folds ASCII only, like lowerAscii().
  contains: (text, p) => `instr(lower(${text}), ${p}) > 0`,
  // Strict json_valid() over [0-9.-] accepts exactly -?(0|[1-9][0-9]*)(\.[0-9]+)? and never raises.
  isNumeric: (text) => `(length(${text}) <= ${NUMERIC_MAX_LENGTH} AND ${text} NOT GLOB '*[^0-9.-]*' AND json_valid(${text}))`,
  asNumber: (text) => `CAST(${text} AS REAL)`,
  // rtrim strips the trailing non-slash characters, leaving the prefix up to the last slash.
  lastSegment: (text) => `substr(${text}, length(rtrim(${text}, replace(${text}, '/', ''))) + 1)`,
};

function postgresSlot(json: string): Slot {
  const type = `jsonb_typeof(${json})`;
  // CASE, unlike AND, guarantees the cast only runs on a value of the right type.
  return {
    present: `COALESCE(${type}, 'null') <> 'null'`,
    num: `CASE WHEN ${type} = 'number' THEN (${json})::numeric END`,
    bool: `CASE WHEN ${type} = 'boolean' THEN (${json})::boolean END`,
    str: `CASE WHEN ${type} = 'string' THEN ${json} #>> '{}' END`,
    nullable: true,
  };
}

const postgres: SqlDialect = {
  // `->` with a text key never indexes arrays, matching SQLite's $."key" and the evaluator.
  path: (segments) => postgresSlot(`(r.data${segments.map((s) => ` -> '${s}'`).join('')})`),
  each: { from: 'jsonb_each(r.data) j', key: 'j.key', slot: postgresSlot('j.value') },
  column: columnSlot,
  // An explicit collation on `=` would keep PostgreSQL off the column's index, so only ordering gets it.
  bytewise: (text) => `(${text}) COLLATE "C"`,
  numberParam: (p) => `${p}::numeric`,
  booleanParam: (p) => `${p}::boolean`,
  booleanValue: (b) => b,
  // Under COLLATE "C", lower() folds ASCII only.
  contains: (text, p) => `strpos(lower((${text}) COLLATE "C"), ${p}) > 0`,
  isNumeric: (text) => `(length(${text}) <= ${NUMERIC_MAX_LENGTH} AND ${text} ~ '${NUMERIC_PATTERN}')`,
  asNumber: (text) => `(${text})::numeric`,
  lastSegment: (text) => `regexp_replace(${text}, '^.*/', '')`,
};

export const DIALECTS: Record<Dialect, SqlDialect> = { sqlite, postgres };
