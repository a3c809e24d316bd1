// Value semantics shared by the in-memory evaluator and the SQL compiler, so both agree bit for bit.
import type { TermValue } from './types.js';

// At most 15 characters: every such decimal converts to a distinct double in the same order,
// so JavaScript, SQLite (REAL) and PostgreSQL (numeric) compare them identically.
const NUMERIC = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?$/;
export const NUMERIC_PATTERN = '^-?(0|[1-9][0-9]*)([.][0-9]+)?$';
export const NUMERIC_MAX_LENGTH = 15;

export function isNumericString(s: string): boolean {
  return s.length <= NUMERIC_MAX_LENGTH && NUMERIC.test(s);
}

const DATE_TIME = /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?([Zz]|[+-]\d{2}:?\d{2})?$/;

/** A full ISO-8601 date-time in Date.toISOString() form (no zone = UTC), so stored timestamps compare chronologically. */
export function normalizeDateTime(s: string): string | undefined {
  const m = DATE_TIME.exec(s);
  if (!m) return undefined;
  const [y, mo, d, h, mi] = [1, 2, 3, 4, 5].map((i) => Number(m[i]));
  const sec = m[6] ? Number(m[6]) : 0;
  const ms = m[7] ? Number(m[7].slice(0, 3).padEnd(3, '0')) : 0;
  if (mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || sec > 59) return undefined;
  let offset = 0;
  if (m[8] && m[8].toUpperCase() !== 'Z') {
    const digits = m[8].replace(':', '');
    const oh = Number(digits.slice(1, 3));
    const om = Number(digits.slice(3, 5));
    if (oh > 23 || om > 59) return undefined;
    offset = (digits[0] === '-' ? -1 : 1) * (oh * 60 + om);
  }
  // setUTCFullYear, unlike Date.UTC, keeps years 0..99 as they are.
  const date = new Date(0);
  date.setUTCFullYear(y, mo - 1, d);
  // A day past the month's end rolls over; a real date survives the round trip.
  if (date.getUTCDate() !== d) return undefined;
  date.setUTCHours(h, mi - offset, sec, ms);
  return date.toISOString();
}

/** ASCII-only lower case: SQLite's lower() and PostgreSQL's lower() under COLLATE "C" do exactly this. */
export function lowerAscii(s: string): string {
  return s.replace(/[A-Z]+/g, (c) => c.toLowerCase());
}

// UTF-16 order differs from code point order (= UTF-8 byte order, what both databases use)
// only between surrogates and U+E000..U+FFFF; shifting those two ranges fixes it.
function codePointUnit(u: number): number {
  return u >= 0xe000 ? u - 0x800 : u >= 0xd800 ? u + 0x2000 : u;
}

/** Bytewise (UTF-8) order, as SQLite BINARY and PostgreSQL COLLATE "C" compare text. */
export function compareStrings(a: string, b: string): number {
  if (a === b) return 0;
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) return codePointUnit(x) - codePointUnit(y);
  }
  return a.length - b.length;
}

/** A term value in every form a comparison may need. */
export interface Operand {
  /** Compared against stored strings (tags, rels, string properties); ISO date-times normalized. */
  text: string;
  /** Only a string term orders string properties; other terms only test them for equality (as text). */
  isString: boolean;
  /** Compared against stored numbers: a number term, or a numeric string. */
  number?: number;
  /** Compared against stored booleans: a boolean term, or "true"/"false". */
  boolean?: boolean;
  /** `text` as a number when it is a numeric string: ordering ops on tags compare numerically then. */
  textNumber?: number;
  /** The value as sent, lower-cased, for `~`. */
  lower: string;
}

export function operandOf(value: TermValue | undefined): Operand {
  const v = value ?? '';
  const text = typeof v === 'string' ? (normalizeDateTime(v) ?? v) : String(v);
  const numeric = isNumericString(text);
  return {
    text,
    isString: typeof v === 'string',
    number: typeof v === 'number' ? v : numeric ? Number(text) : undefined,
    boolean: typeof v === 'boolean' ? v : v === 'true' ? true : v === 'false' ? false : undefined,
    textNumber: numeric ? Number(text) : undefined,
    lower: lowerAscii(String(v)),
  };
}

export function lastSegment(link: string): string {
  return link.slice(link.lastIndexOf('/') + 1);
}
