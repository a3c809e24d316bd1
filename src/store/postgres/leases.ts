import type pg from 'pg';
import { prepared } from './statements.js';

// Read leases (DESIGN.md, "Read cache on PostgreSQL"). A process holding one answers reads from its
// cache with no round trip; in exchange every writer answers only once each live lease has applied
// its change, or has run out. The reader's side is in read-cache.ts; the writer's is here.

/** How long a lease lasts unless renewed, by default (KEEL_READ_LEASE_MS). */
export const DEFAULT_LEASE_MS = 2000;

/**
 * Takes or renews this process's lease and reports the cache position it has applied (`$2`); with
 * `$4` (the schema), also tells the waiting writers (an acknowledgement). The expiry is the
 * database's clock at the statement's start plus the lease: never before the moment the process
 * sent it, from which the process counts its own (shorter) lease.
 */
export const RENEW = `WITH up AS (
    INSERT INTO keel_cache_leases (id, applied, expires) VALUES ($1, $2, now() + $3::int * interval '1 millisecond')
    ON CONFLICT (id) DO UPDATE SET applied = EXCLUDED.applied, expires = EXCLUDED.expires RETURNING 1)
  SELECT pg_notify('keel_cache_ack', $4) FROM up WHERE $4::text IS NOT NULL`;

export const RELEASE = 'DELETE FROM keel_cache_leases WHERE id = $1';

/** Leases of processes gone without releasing theirs: long expired, only taking room. */
export const FORGET_EXPIRED = `DELETE FROM keel_cache_leases WHERE expires < now() - interval '1 hour'`;

/**
 * The position to wait for (`$1`, or the current one on the first check: it covers every change
 * committed before it) and, while a live lease has applied less, the milliseconds until the first
 * such lease runs out.
 */
const CHECK = `SELECT t.n, (SELECT ceil(EXTRACT(EPOCH FROM min(l.expires) - now()) * 1000) FROM keel_cache_leases l WHERE l.expires > now() AND l.applied < t.n) AS wait
  FROM (SELECT COALESCE($1::bigint, n) AS n FROM keel_cache_epoch) t`;

/**
 * A writer's wait, after its commit and before its answer, for every live lease to have applied
 * the change. Acknowledgements arrive as notices (heard()); a lease that never acknowledges (its
 * process stopped, or lost its connection) is waited for only until it runs out, which its
 * process, counting from before it asked, sees first.
 */
export class LeaseWaits {
  private acks = 0;
  private readonly sleepers = new Set<() => void>();

  constructor(private readonly pool: pg.Pool) {}

  /** Another process (or this one) acknowledged a position. */
  heard(): void {
    this.acks++;
    for (const wake of this.sleepers) wake();
  }

  async settle(): Promise<void> {
    let target: string | null = null;
    for (;;) {
      const acks = this.acks;
      const checked: pg.QueryResult<{ n: string; wait: string | null }> = await this.pool.query(prepared(CHECK, [target]));
      const { n, wait } = checked.rows[0];
      target = n;
      if (wait === null) return;
      if (this.acks !== acks) continue; // an acknowledgement came while the check ran
      await new Promise<void>((resolve) => {
        const wake = () => {
          clearTimeout(timer);
          this.sleepers.delete(wake);
          resolve();
        };
        const timer = setTimeout(wake, Math.max(1, Number(wait)));
        this.sleepers.add(wake);
      });
    }
  }
}
