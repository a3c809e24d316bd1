import type pg from 'pg';
import { prepared } from './statements.js';

// Read leases (DESIGN.md, "Read cache on PostgreSQL"). A process holding one answers reads from its
// cache with no round trip; in exchange every writer answers only once each live lease has applied
// its change, or has run out. The reader's side is in read-cache.ts; the writer's is here.

/** How long a lease lasts unless renewed, by default (KEEL_READ_LEASE_MS). */
export const DEFAULT_LEASE_MS = 2000;

/**
 * Takes or renews this process's lease and reports the cache position it has applied (`$2`); with
 * `$4` (the schema), also tells the waiting writers (an acknowledgement: the schema, the lease and
 * the position). The expiry is the database's clock at the statement's start plus the lease: never
 * before the moment the process sent it, from which the process counts its own (shorter) lease.
 */
export const RENEW = `WITH up AS (
    INSERT INTO keel_cache_leases (id, applied, expires) VALUES ($1, $2, now() + $3::int * interval '1 millisecond')
    ON CONFLICT (id) DO UPDATE SET applied = EXCLUDED.applied, expires = EXCLUDED.expires RETURNING 1)
  SELECT pg_notify('keel_cache_ack', $4::text || ' ' || $1 || ' ' || $2) FROM up WHERE $4::text IS NOT NULL`;

export const RELEASE = 'DELETE FROM keel_cache_leases WHERE id = $1';

/** Leases of processes gone without releasing theirs: long expired, only taking room. */
export const FORGET_EXPIRED = `DELETE FROM keel_cache_leases WHERE expires < now() - interval '1 hour'`;

/**
 * The position to wait for (`$1`, or the current one on the first check: it covers every change
 * committed before it) and each live lease that has applied less, with the milliseconds until it
 * runs out.
 */
const CHECK = `SELECT t.n, l.id, ceil(EXTRACT(EPOCH FROM l.expires - now()) * 1000) AS ms
  FROM (SELECT COALESCE($1::bigint, n) AS n FROM keel_cache_epoch) t LEFT JOIN keel_cache_leases l ON l.expires > now() AND l.applied < t.n`;

/** Checks again this often while acknowledgements are missing (the notices' connection may be down). */
const RECHECK_MS = 100;

/**
 * A writer's wait, after its commit and before its answer, for every live lease to have applied
 * the change: until each lagging lease has acknowledged a position at least the one read after the
 * commit, or has run out. Acknowledgements arrive as notices (heard()); a lease that never
 * acknowledges (its process stopped, or lost its connection) is waited for only until it runs out,
 * which its process, counting from before it asked, sees first. A lease renewed meanwhile does
 * not extend the wait: its process answers from memory under the new lease only what it read
 * after renewing, which is after this commit.
 */
export class LeaseWaits {
  private readonly watchers = new Set<(id: string, applied: number) => void>();

  constructor(private readonly pool: pg.Pool) {}

  /** An acknowledgement's payload after the schema: the lease and the position it has applied. */
  heard(payload: string): void {
    const [id, applied] = payload.split(' ');
    for (const watch of this.watchers) watch(id, Number(applied));
  }

  async settle(): Promise<void> {
    const acked = new Map<string, number>();
    /** Each lagging lease and when (performance.now()) it runs out, as first seen: a renewal does not move that. */
    const lagging = new Map<string, number>();
    let goal = 0;
    const pending = () => [...lagging].filter(([id, until]) => (acked.get(id) ?? -1) < goal && until > performance.now());
    let wake: (() => void) | undefined;
    const watch = (id: string, applied: number) => {
      if (applied > (acked.get(id) ?? -1)) acked.set(id, applied);
      wake?.();
    };
    this.watchers.add(watch); // from before the check: no acknowledgement is missed
    try {
      let target: string | null = null;
      for (;;) {
        const checked: pg.QueryResult<{ n: string; id: string | null; ms: string | null }> = await this.pool.query(prepared(CHECK, [target]));
        target = checked.rows[0].n;
        goal = Number(target);
        const now = performance.now();
        const still = new Set<string>();
        for (const row of checked.rows) {
          if (row.id === null) continue;
          still.add(row.id);
          if (!lagging.has(row.id)) lagging.set(row.id, now + Number(row.ms));
        }
        for (const id of lagging.keys()) if (!still.has(id)) lagging.delete(id); // caught up, or gone
        if (pending().length === 0) return;
        await new Promise<void>((resolve) => {
          const soonest = Math.min(...pending().map(([, until]) => until)) - performance.now();
          const done = () => {
            clearTimeout(timer);
            wake = undefined;
            resolve();
          };
          const timer = setTimeout(done, Math.max(1, Math.min(RECHECK_MS, soonest + 1)));
          wake = () => {
            if (pending().length === 0) done();
          };
        });
        if (pending().length === 0) return;
      }
    } finally {
      this.watchers.delete(watch);
    }
  }
}
