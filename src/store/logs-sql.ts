// The log_lines statements both backends share; only placeholders and the substring function differ.
import { SqlParams, type Dialect } from './sql.js';
import { LOG_LABELS, type LogFilter, type LogLabel, type LogLine, type NewLogLine } from './types.js';

const COLUMNS = `id, org, ts, ${LOG_LABELS.join(', ')}, line`;
/** Lines a label-values answer looks at, at most: the answer stays bounded however busy the range. */
export const LABEL_SCAN = 100_000;

export type LogRow = { id: number | string; org: string; ts: string; line: string } & Record<LogLabel, string>;

export function fromLogRow(row: LogRow): LogLine {
  const labels = {} as Record<LogLabel, string>;
  for (const label of LOG_LABELS) labels[label] = row[label];
  return { id: Number(row.id), org: row.org, ts: row.ts, labels, line: row.line };
}

/** The columns a line is inserted with, in order: org, ts, the labels, line. */
export const INSERT_COLUMNS = ['org', 'ts', ...LOG_LABELS, 'line'];

/** A line's values in INSERT_COLUMNS order. */
export function logValues(line: NewLogLine): string[] {
  return [line.org, line.ts, ...LOG_LABELS.map((label) => line.labels[label] ?? ''), line.line];
}

export function logsQuery(dialect: Dialect, filter: LogFilter): { sql: string; values: unknown[] } {
  const params = new SqlParams(dialect);
  const where = [`org = ${params.add(filter.org)}`, `ts >= ${params.add(filter.from)}`, `ts < ${params.add(filter.to)}`];
  for (const m of filter.labels) where.push(`${m.label} ${m.op === '=' ? '=' : '<>'} ${params.add(m.value)}`);
  for (const c of filter.contains) {
    const found = dialect === 'sqlite' ? `instr(line, ${params.add(c.text)})` : `strpos(line, ${params.add(c.text)})`;
    where.push(`${found} ${c.negate ? '=' : '>'} 0`);
  }
  const [cmp, order] = filter.backward ? ['<', 'DESC'] : ['>', 'ASC'];
  if (filter.after) {
    // Each placeholder its own value: SQLite's `?` are positional.
    where.push(`(ts ${cmp} ${params.add(filter.after.ts)} OR (ts = ${params.add(filter.after.ts)} AND id ${cmp} ${params.add(filter.after.id)}))`);
  }
  const sql = `SELECT ${COLUMNS} FROM log_lines WHERE ${where.join(' AND ')} ORDER BY ts ${order}, id ${order} LIMIT ${params.add(filter.limit)}`;
  return { sql, values: params.values };
}

export function labelValuesQuery(dialect: Dialect, org: string, label: LogLabel, from: string, to: string, limit: number): { sql: string; values: unknown[] } {
  if (!LOG_LABELS.includes(label)) throw new Error(`not a log label: ${label}`);
  const params = new SqlParams(dialect);
  const scan = `SELECT ${label} AS value FROM log_lines WHERE org = ${params.add(org)} AND ts >= ${params.add(from)} AND ts < ${params.add(to)} AND ${label} <> '' ORDER BY ts DESC LIMIT ${params.add(LABEL_SCAN)}`;
  return { sql: `SELECT DISTINCT value FROM (${scan}) s ORDER BY value LIMIT ${params.add(limit)}`, values: params.values };
}

/**
 * What a line takes, as an org's cap on stored lines counts it: the bytes (UTF-8) of its text and
 * labels. LINE_BYTES computes the same in SQL.
 */
export function lineBytes(line: NewLogLine): number {
  let bytes = Buffer.byteLength(line.line);
  for (const label of LOG_LABELS) bytes += Buffer.byteLength(line.labels[label] ?? '');
  return bytes;
}

export const LINE_BYTES: Record<Dialect, string> = {
  sqlite: ['line', ...LOG_LABELS].map((c) => `length(CAST(${c} AS BLOB))`).join(' + '),
  postgres: ['line', ...LOG_LABELS].map((c) => `octet_length(${c})`).join(' + '),
};

/** Each org's bytes among `lines`, as rows of log_lines_usage. */
export function usageOf(lines: readonly NewLogLine[]): Map<string, number> {
  const bytes = new Map<string, number>();
  for (const line of lines) bytes.set(line.org, (bytes.get(line.org) ?? 0) + lineBytes(line));
  return bytes;
}

/** Deletes up to `max` of an org's oldest lines before `before`, oldest first; returns the bytes of each. */
export function pruneLogsQuery(dialect: Dialect, org: string, before: string, max: number): { sql: string; values: unknown[] } {
  const params = new SqlParams(dialect);
  const oldest = `SELECT id FROM log_lines WHERE org = ${params.add(org)} AND ts < ${params.add(before)} ORDER BY ts, id LIMIT ${params.add(max)}`;
  return { sql: `DELETE FROM log_lines WHERE id IN (${oldest}) RETURNING ${LINE_BYTES[dialect]} AS bytes`, values: params.values };
}

/** An org's oldest lines, oldest first, at most `max`: their ids and bytes. */
export function oldestLogsQuery(dialect: Dialect, org: string, max: number): { sql: string; values: unknown[] } {
  const params = new SqlParams(dialect);
  return { sql: `SELECT id, ${LINE_BYTES[dialect]} AS bytes FROM log_lines WHERE org = ${params.add(org)} ORDER BY ts, id LIMIT ${params.add(max)}`, values: params.values };
}

/** How many of `rows` (oldest first) to remove so that at least `bytes` go (all of them if they hold less). */
export function enoughOf(rows: ReadonlyArray<{ bytes: number | string }>, bytes: number): number {
  let sum = 0;
  for (let i = 0; i < rows.length; i++) {
    sum += Number(rows[i].bytes);
    if (sum >= bytes) return i + 1;
  }
  return rows.length;
}

export const LOG_USAGE = 'SELECT org, SUM(bytes) AS bytes, COUNT(*) AS n FROM log_lines_usage GROUP BY org';
