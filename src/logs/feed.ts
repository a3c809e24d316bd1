// New log lines for the tails that follow an org: one reader per org however many tails follow it.
// It wakes on this process's changes (the reconcilers announce each pass) and polls for lines other
// Keel processes wrote. A line's time is set before its transaction commits, so a line may appear
// after lines with later times: each read starts OVERLAP_MS before the newest time seen and skips
// the lines already delivered.
import { changes } from '../audit/changes.js';
import { Coalesced } from '../coalesced.js';
import type { LogLine, Store } from '../store/types.js';
import { msOfTs, tsOf, tsOfMs } from './time.js';

const OVERLAP_MS = 2_000;
const PAGE = 500;
/** Pages one read takes at most (it hands them to the tails, then reads on from where it stopped). */
const PAGES_PER_READ = 20;
const END = tsOf(10n ** 19n);

export type Subscriber = (lines: readonly LogLine[]) => void;

class OrgFeed {
  readonly subscribers = new Set<Subscriber>();
  /** Ids delivered whose time is within the overlap, by id, with their time. */
  private readonly seen = new Map<number, string>();
  private newest: string;
  /** Where a read that took PAGES_PER_READ stopped: the next one goes on after it. */
  private carry?: LogLine;
  private timer?: NodeJS.Timeout;
  private stopped = false;
  /** Reads now (or right after the read under way). */
  readonly read: () => Promise<void>;

  constructor(
    private readonly store: Store,
    private readonly org: string,
    private readonly pollMs: number,
    onError: (err: unknown) => void,
  ) {
    this.newest = tsOfMs(Date.now());
    this.read = new Coalesced(() => this.readOnce(), { onError, goOn: () => !this.stopped, settled: () => this.schedule() }).run;
    this.schedule();
  }

  private schedule(): void {
    if (this.stopped) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.read(), this.pollMs);
    this.timer.unref();
  }

  /** One read: true when it stopped at PAGES_PER_READ (read again at once). */
  private async readOnce(): Promise<boolean> {
    const from = tsOfMs(msOfTs(this.newest) - OVERLAP_MS);
    let after = this.carry;
    this.carry = undefined;
    const fresh: LogLine[] = [];
    for (let page = 0; page < PAGES_PER_READ; page++) {
      const rows = await this.store.logs({ org: this.org, from, to: END, backward: false, labels: [], contains: [], after, limit: PAGE });
      for (const row of rows) {
        if (this.seen.has(row.id)) continue;
        this.seen.set(row.id, row.ts);
        fresh.push(row);
        if (row.ts > this.newest) this.newest = row.ts;
      }
      if (rows.length < PAGE) break;
      after = rows[rows.length - 1];
      if (page === PAGES_PER_READ - 1) this.carry = after;
    }
    const horizon = tsOfMs(msOfTs(this.newest) - OVERLAP_MS);
    for (const [id, ts] of this.seen) if (ts < horizon) this.seen.delete(id);
    if (fresh.length > 0 && !this.stopped) {
      fresh.sort((a, b) => (a.ts < b.ts ? -1 : a.ts > b.ts ? 1 : a.id - b.id));
      for (const subscriber of this.subscribers) subscriber(fresh);
    }
    return this.carry !== undefined;
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }
}

export class LogFeed {
  private readonly feeds = new Map<string, OrgFeed>();
  private readonly onChange = (org: string) => void this.feeds.get(org)?.read();

  constructor(
    private readonly store: Store,
    private readonly pollMs: number,
    private readonly onError: (err: unknown) => void,
  ) {}

  /** Calls `subscriber` with each batch of new lines of the org (in time order) until the returned function is called. */
  subscribe(org: string, subscriber: Subscriber): () => void {
    let feed = this.feeds.get(org);
    if (!feed) {
      if (this.feeds.size === 0) changes.on('change', this.onChange);
      this.feeds.set(org, (feed = new OrgFeed(this.store, org, this.pollMs, this.onError)));
    }
    feed.subscribers.add(subscriber);
    return () => {
      feed.subscribers.delete(subscriber);
      if (feed.subscribers.size > 0 || this.feeds.get(org) !== feed) return;
      feed.stop();
      this.feeds.delete(org);
      if (this.feeds.size === 0) changes.off('change', this.onChange);
    };
  }

  close(): void {
    for (const feed of this.feeds.values()) feed.stop();
    this.feeds.clear();
    changes.off('change', this.onChange);
  }
}
