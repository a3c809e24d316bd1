// Matching log lines against a query without holding the request thread: lines are matched in
// slices of at most SLICE_MS, with a turn for other work between slices, and a read is refused once
// its matching has taken its time budget or its work cap. A line costs at most its length times the
// query's compiled size (re2js matches in linear time, and parseLogQL bounds that size), so one
// slice overruns SLICE_MS by at most one line's matching.
import { setImmediate as nextTurn } from 'node:timers/promises';
import { ApiError } from '../errors.js';
import type { LogLine } from '../store/types.js';
import { matches, type LogQuery } from './logql.js';

/** Longest stretch of matching before other work gets a turn. */
export const SLICE_MS = 2;
/** Work one read may do: characters matched times the query's compiled size. */
export const MAX_MATCH_WORK = 2_000_000_000;
/** A line's labels, in characters, as a matcher sees them (they are names: at most 64 each). */
const LABELS_COST = 5 * 64;

export interface MatchBudget {
  /** Matching time a read may spend in all (Infinity for a tail, which matches as lines come). */
  budgetMs: number;
  maxWork: number;
}

export class LineMatcher {
  private work = 0;
  private spentMs = 0;
  constructor(
    private readonly query: LogQuery,
    private readonly budget: MatchBudget,
  ) {}

  /** The lines that match, in their order; rejects with a 400 when the read is over its budget. */
  async filter(lines: readonly LogLine[]): Promise<LogLine[]> {
    const out: LogLine[] = [];
    let start = performance.now();
    for (const line of lines) {
      this.work += (line.line.length + LABELS_COST) * (this.query.cost + 1);
      if (this.work > this.budget.maxWork) {
        throw ApiError.badRequest(`the query's regular expressions would do more than ${this.budget.maxWork} steps over the lines in its range; narrow the time range, or select with = matchers and |= filters`);
      }
      if (matches(this.query, line.labels, line.line)) out.push(line);
      const now = performance.now();
      if (now - start >= SLICE_MS) {
        this.spend(now - start);
        await nextTurn();
        start = performance.now();
      }
    }
    this.spend(performance.now() - start);
    return out;
  }

  private spend(ms: number): void {
    this.spentMs += ms;
    if (this.spentMs > this.budget.budgetMs) {
      throw ApiError.badRequest(`the query spent more than ${this.budget.budgetMs} ms matching lines (logsQueryBudgetMs); narrow the time range, simplify its regular expressions, or select with = matchers and |= filters`);
    }
  }
}
