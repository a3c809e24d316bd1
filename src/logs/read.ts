// Reading log lines for a LogQL query, and the Loki answer's shape.
import { ApiError } from '../errors.js';
import { LOG_LABELS, type LogLine, type Store } from '../store/types.js';
import { fullyPushed, matchesNothing, pushdown, type LogQuery } from './logql.js';
import { LineMatcher, type MatchBudget } from './match.js';
import { nsText } from './time.js';

/** Lines one request may look at; a query that needs more to fill its limit is refused. */
export const SCAN_BUDGET = 200_000;
const PAGE = 1000;

export interface Range {
  org: string;
  /** Inclusive and exclusive, as log times. */
  from: string;
  to: string;
  backward: boolean;
  limit: number;
}

/** Up to `limit` matching lines in the range, in its direction: SQL takes what it can, the rest is checked here. */
export async function readLines(store: Store, query: LogQuery, range: Range, budget: MatchBudget): Promise<LogLine[]> {
  if (matchesNothing(query)) return [];
  const matcher = new LineMatcher(query, budget);
  const pushed = pushdown(query);
  const exact = fullyPushed(query);
  const out: LogLine[] = [];
  let after: LogLine | undefined;
  let scanned = 0;
  for (;;) {
    const page = exact ? range.limit - out.length : PAGE;
    const rows = await store.logs({ org: range.org, from: range.from, to: range.to, backward: range.backward, ...pushed, after, limit: page });
    for (const row of exact ? rows : await matcher.filter(rows)) {
      out.push(row);
      if (out.length >= range.limit) return out;
    }
    if (rows.length < page) return out;
    scanned += rows.length;
    if (scanned >= SCAN_BUDGET) {
      throw ApiError.badRequest(`the query looked at ${SCAN_BUDGET} lines without filling its limit; narrow the time range, or select with = matchers and |= filters`);
    }
    after = rows[rows.length - 1];
  }
}

export type Stream = { stream: Record<string, string>; values: Array<[string, string]> };

/** The labels a line shows: those it has (Loki has no empty labels). */
export function streamLabels(labels: LogLine['labels']): Record<string, string> {
  const out: Record<string, string> = {};
  for (const label of LOG_LABELS) if (labels[label]) out[label] = labels[label];
  return out;
}

/** Lines grouped into streams by their label set, each stream's values in the order given. */
export function toStreams(lines: readonly LogLine[]): Stream[] {
  const streams = new Map<string, Stream>();
  for (const line of lines) {
    const stream = streamLabels(line.labels);
    const key = JSON.stringify(stream);
    let entry = streams.get(key);
    if (!entry) streams.set(key, (entry = { stream, values: [] }));
    entry.values.push([nsText(line.ts), line.line]);
  }
  return [...streams.values()];
}
