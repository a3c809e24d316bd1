import { identity, type Principal } from '../auth/principal.js';
import { ApiError } from '../errors.js';

/** Retry-After, in seconds, of a caller whose queue of lists is full. */
const RETRY_AFTER_S = 1;

/**
 * Lists and queries in the database per caller: at most `running` at once, the next `waiting` in
 * line (in the order they came), more refused with 429. One caller's costly queries thus hold at most
 * `running` of the list worker's or the database's turns, and another caller's list runs beside them
 * instead of behind them.
 */
export class Turns {
  private readonly callers = new Map<string, { running: number; line: Array<() => void> }>();

  constructor(
    private readonly running: number,
    private readonly waiting: number,
  ) {}

  async run<T>(principal: Principal, work: () => Promise<T>): Promise<T> {
    const who = identity(principal);
    let caller = this.callers.get(who);
    if (!caller) this.callers.set(who, (caller = { running: 0, line: [] }));
    if (caller.running >= this.running) {
      if (caller.line.length >= this.waiting) {
        throw new ApiError('rate_limited', `this caller already has ${this.running} lists or queries running and ${this.waiting} waiting (queriesPerPrincipal); retry after ${RETRY_AFTER_S} s`, { retryAfter: RETRY_AFTER_S });
      }
      await new Promise<void>((resolve) => caller!.line.push(resolve));
    } else caller.running++;
    try {
      return await work();
    } finally {
      // The turn passes to the next in line, or is given back.
      const next = caller.line.shift();
      if (next) next();
      else if (--caller.running === 0) this.callers.delete(who);
    }
  }
}
