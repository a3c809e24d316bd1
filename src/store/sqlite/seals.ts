// SQLite's audit chain is sealed after the fact, off the writer's thread: appending an event
// writes only its row (pos, context, body) and moves its org's last_seq, and the housekeeping
// thread (housekeeper.ts) then hashes the events after the org's sealed_seq in order and records
// their hashes in audit_seals, in the events file, moving sealed_seq and last_hash with them in one
// short write. Reads catch up first, so they only ever see sealed events, as on PostgreSQL.
import type Database from 'better-sqlite3';

/** Each audit_seals row holds the hashes of the events at (pos_from..pos_to), 64 hex digits each. */
const HASH_LENGTH = 64;

/** The hash of the event at `pos` (an SQL expression), from the seal that covers it; NULL when none does. */
export function sealHashAt(pos: string): string {
  return `(SELECT CASE WHEN s.pos_from <= ${pos} THEN substr(s.hashes, (${pos} - s.pos_from) * ${HASH_LENGTH} + 1, ${HASH_LENGTH}) END
    FROM main.audit_seals s WHERE s.pos_to >= ${pos} ORDER BY s.pos_to LIMIT 1)`;
}

export interface SealOptions {
  /** ORG_SPAN (lookup.ts). */
  span: number;
  /** chainHash (audit/chain.ts). */
  chainHash: (previous: string, seq: number, body: string) => string;
  /** Runs `fn` in a write transaction of the events file. */
  write: (fn: () => void) => void;
}

/**
 * Seals every org's committed events that are not sealed yet. Its source text is also run in the
 * housekeeping thread, so it uses nothing but its arguments. The hashes are computed outside the
 * write, which then applies only if no one sealed the same events meanwhile (another process on
 * the same file: its seals are the same). An event missing from the sequence (a row deleted by
 * hand) stops its org's seals there, so verification reports it.
 */
export function sealNew(db: Database.Database, options: SealOptions): void {
  const SEAL_ROW_EVENTS = 4096;
  const unsealed = db.prepare('SELECT org, org_no, sealed_seq, last_seq, last_hash FROM main.audit_heads WHERE sealed_seq < last_seq');
  const events = db.prepare('SELECT pos, body FROM main.audit_events WHERE pos > ? AND pos <= ? ORDER BY pos');
  const seals: Array<{ org: string; from: number; to: number; hash: string; rows: Array<[number, number, string]> }> = [];
  db.transaction(() => {
    for (const head of unsealed.all() as Array<{ org: string; org_no: number; sealed_seq: number; last_seq: number; last_hash: string }>) {
      const base = head.org_no * options.span;
      let seq = head.sealed_seq;
      let hash = head.last_hash;
      const rows: Array<[number, number, string]> = [];
      let hashes: string[] = [];
      for (const event of events.iterate(base + seq, base + head.last_seq) as Iterable<{ pos: number; body: string }>) {
        if (event.pos !== base + seq + 1) break;
        seq++;
        hash = options.chainHash(hash, seq, event.body);
        hashes.push(hash);
        if (hashes.length === SEAL_ROW_EVENTS) {
          rows.push([base + seq, base + seq - hashes.length + 1, hashes.join('')]);
          hashes = [];
        }
      }
      if (hashes.length > 0) rows.push([base + seq, base + seq - hashes.length + 1, hashes.join('')]);
      if (rows.length > 0) seals.push({ org: head.org, from: head.sealed_seq, to: seq, hash, rows });
    }
  })();
  if (seals.length === 0) return;
  const move = db.prepare('UPDATE main.audit_heads SET sealed_seq = ?, last_hash = ? WHERE org = ? AND sealed_seq = ?');
  const insert = db.prepare('INSERT INTO main.audit_seals (pos_to, pos_from, hashes) VALUES (?, ?, ?)');
  options.write(() => {
    for (const seal of seals) {
      if (move.run(seal.to, seal.hash, seal.org, seal.from).changes === 0) continue;
      for (const row of seal.rows) insert.run(...row);
    }
  });
}
