// SQLite finds audit events by resource, time and id through audit_lookup, kept in a database file
// of its own (attached as `lookup`) and brought up to date in batches: appending an event then
// writes only its row, and the lookup entries are sorted and inserted later, by the housekeeper's
// thread, which never needs the events file's write lock. Everything here is derived from the
// events: a lookup file that is missing, or that belongs to another copy of the events, is
// rebuilt from them.

/** Events of one org own the rowids [org_no * ORG_SPAN, (org_no + 1) * ORG_SPAN): pos = org_no * ORG_SPAN + seq. */
export const ORG_SPAN = 2 ** 40;

/** The lookup file that goes with an events file. */
export function lookupFileOf(file: string): string {
  return file === ':memory:' ? ':memory:' : `${file}-lookup`;
}

export const LOOKUP_SCHEMA = `
  CREATE TABLE IF NOT EXISTS lookup.audit_lookup (org TEXT NOT NULL, key TEXT NOT NULL, pos INTEGER NOT NULL, PRIMARY KEY (org, key, pos)) WITHOUT ROWID;
  CREATE TABLE IF NOT EXISTS lookup.lookup_through (org TEXT PRIMARY KEY, org_no INTEGER NOT NULL, seq INTEGER NOT NULL, hash TEXT NOT NULL, pruned INTEGER NOT NULL);`;

/**
 * Orgs whose entries were made from other events than these (a restored or replaced events file):
 * the event they were last brought up to is not there, or is another one (chain hashes differ).
 */
const STALE = `SELECT t.org FROM lookup.lookup_through t
  LEFT JOIN main.audit_heads h ON h.org = t.org LEFT JOIN main.audit_prunes p ON p.org = t.org
  WHERE h.org IS NULL OR h.org_no <> t.org_no OR h.last_seq < t.seq
     OR (t.seq > COALESCE(p.up_to_seq, 0) AND t.hash IS NOT (SELECT e.hash FROM main.audit_events e WHERE e.pos = h.org_no * ${ORG_SPAN} + t.seq))`;

/** The events appended since the last catch-up, as of this transaction's snapshot of the events file. */
const NEW_EVENTS = `SELECT e.org, e.pos, e.resource_id, e.event_time, e.id FROM main.audit_heads h
  LEFT JOIN lookup.lookup_through t ON t.org = h.org
  JOIN main.audit_events e ON e.pos > h.org_no * ${ORG_SPAN} + COALESCE(t.seq, 0) AND e.pos <= h.org_no * ${ORG_SPAN} + h.last_seq`;

/**
 * One catch-up, run in order in one deferred transaction (it reads the events file and writes
 * only the lookup file, so it takes no lock the events' writer needs).
 */
export const LOOKUP_CATCH_UP = [
  `DELETE FROM lookup.audit_lookup WHERE org IN (${STALE})`,
  `DELETE FROM lookup.lookup_through WHERE org IN (${STALE})`,
  // Entries of events that retention removed.
  `DELETE FROM lookup.audit_lookup WHERE (org, key, pos) IN (
     SELECT l.org, l.key, l.pos FROM lookup.lookup_through t
     JOIN main.audit_prunes p ON p.org = t.org AND p.up_to_seq > t.pruned
     JOIN lookup.audit_lookup l ON l.org = t.org AND l.pos <= t.org_no * ${ORG_SPAN} + p.up_to_seq)`,
  // In key order: a sorted insert touches each b-tree page once.
  `WITH new AS MATERIALIZED (${NEW_EVENTS})
   INSERT OR IGNORE INTO lookup.audit_lookup (org, key, pos)
     SELECT org, 'r:' || resource_id, pos FROM new UNION ALL
     SELECT org, 't:' || event_time, pos FROM new UNION ALL
     SELECT org, 'i:' || id, pos FROM new ORDER BY 1, 2, 3`,
  `INSERT INTO lookup.lookup_through (org, org_no, seq, hash, pruned)
     SELECT h.org, h.org_no, h.last_seq, h.last_hash, COALESCE(p.up_to_seq, 0) FROM main.audit_heads h LEFT JOIN main.audit_prunes p ON p.org = h.org WHERE true
     ON CONFLICT (org) DO UPDATE SET org_no = excluded.org_no, seq = excluded.seq, hash = excluded.hash, pruned = excluded.pruned
     WHERE (org_no, seq, pruned) IS NOT (excluded.org_no, excluded.seq, excluded.pruned)`,
];
