// SQLite finds audit events by their fields through a database file of its own (attached as
// `lookup`), brought up to date in batches: appending an event writes only its row, and the
// housekeeper's thread, which never needs the events file's write lock for this, later reads the
// sealed events' fields out of their bodies into audit_fields (one narrow row per event, which
// filtered scans read instead of the bodies) and adds sorted audit_lookup entries by resource, time
// and id. Everything here is derived from the events: a lookup file that is missing, that belongs
// to another copy of the events, or that an older Keel made, is rebuilt from them.
import type Database from 'better-sqlite3';
import type { AuditLayout } from '../audit-sql.js';
import type { AuditFilter } from '../types.js';
import { sealHashAt } from './seals.js';

/** Events of one org own the rowids [org_no * ORG_SPAN, (org_no + 1) * ORG_SPAN): pos = org_no * ORG_SPAN + seq. */
export const ORG_SPAN = 2 ** 40;

/** The lookup file that goes with an events file. */
export function lookupFileOf(file: string): string {
  return file === ':memory:' ? ':memory:' : `${file}-lookup`;
}

/** The lookup file's layout; a file of another version is emptied and rebuilt. */
const LOOKUP_VERSION = 2;

const TABLES = `
  CREATE TABLE IF NOT EXISTS lookup.audit_lookup (org TEXT NOT NULL, key TEXT NOT NULL, pos INTEGER NOT NULL, PRIMARY KEY (org, key, pos)) WITHOUT ROWID;
  CREATE TABLE IF NOT EXISTS lookup.audit_fields (
    pos INTEGER PRIMARY KEY, id TEXT NOT NULL, event_time TEXT NOT NULL, resource_type TEXT NOT NULL, resource_name TEXT NOT NULL,
    resource_id TEXT NOT NULL, subject_name TEXT NOT NULL, action_type TEXT NOT NULL);
  CREATE TABLE IF NOT EXISTS lookup.lookup_through (org TEXT PRIMARY KEY, org_no INTEGER NOT NULL, seq INTEGER NOT NULL, hash TEXT NOT NULL, pruned INTEGER NOT NULL);`;

/** Creates the attached lookup file's tables, first dropping those of another layout. */
export function prepareLookup(db: Database.Database): void {
  if (db.pragma('lookup.user_version', { simple: true }) === LOOKUP_VERSION) return void db.exec(TABLES);
  db.exec(`DROP TABLE IF EXISTS lookup.audit_lookup; DROP TABLE IF EXISTS lookup.audit_fields; DROP TABLE IF EXISTS lookup.lookup_through;
    ${TABLES} PRAGMA lookup.user_version = ${LOOKUP_VERSION};`);
}

/**
 * Orgs whose entries were made from other events than these (a restored or replaced events file):
 * the event they were last brought up to is not sealed there, or is another one (hashes differ).
 */
const STALE = `SELECT t.org, t.org_no FROM lookup.lookup_through t
  LEFT JOIN main.audit_heads h ON h.org = t.org LEFT JOIN main.audit_prunes p ON p.org = t.org
  WHERE h.org IS NULL OR h.org_no <> t.org_no OR h.sealed_seq < t.seq
     OR (t.seq > COALESCE(p.up_to_seq, 0) AND t.hash IS NOT ${sealHashAt(`h.org_no * ${ORG_SPAN} + t.seq`)})`;

/** Each org's sealed events that are past its lookups, as of this transaction's snapshot of the events file. */
const NEW_RANGE = `main.audit_heads h LEFT JOIN lookup.lookup_through t ON t.org = h.org`;
const AFTER_THROUGH = `h.org_no * ${ORG_SPAN} + COALESCE(t.seq, 0)`;
const SEALED_END = `h.org_no * ${ORG_SPAN} + h.sealed_seq`;

/**
 * One catch-up, run in order in one deferred transaction after the seals (seals.ts); it reads the
 * events file and writes only the lookup file, so it takes no lock the events' writer needs.
 */
export const LOOKUP_CATCH_UP = [
  `DELETE FROM lookup.audit_fields WHERE pos IN (
     SELECT f.pos FROM (${STALE}) s JOIN lookup.audit_fields f ON f.pos > s.org_no * ${ORG_SPAN} AND f.pos < (s.org_no + 1) * ${ORG_SPAN})`,
  `DELETE FROM lookup.audit_lookup WHERE org IN (SELECT org FROM (${STALE}))`,
  `DELETE FROM lookup.lookup_through WHERE org IN (SELECT org FROM (${STALE}))`,
  // Entries of events that retention removed.
  `DELETE FROM lookup.audit_lookup WHERE (org, key, pos) IN (
     SELECT l.org, l.key, l.pos FROM lookup.lookup_through t
     JOIN main.audit_prunes p ON p.org = t.org AND p.up_to_seq > t.pruned
     JOIN lookup.audit_lookup l ON l.org = t.org AND l.pos <= t.org_no * ${ORG_SPAN} + p.up_to_seq)`,
  `DELETE FROM lookup.audit_fields WHERE pos IN (
     SELECT f.pos FROM lookup.lookup_through t
     JOIN main.audit_prunes p ON p.org = t.org AND p.up_to_seq > t.pruned
     JOIN lookup.audit_fields f ON f.pos > t.org_no * ${ORG_SPAN} AND f.pos <= t.org_no * ${ORG_SPAN} + p.up_to_seq)`,
  // Every event body, a change's or a custom one's, holds its fields at these paths.
  `INSERT OR REPLACE INTO lookup.audit_fields (pos, id, event_time, resource_type, resource_name, resource_id, subject_name, action_type)
     SELECT e.pos, COALESCE(e.body ->> '$.id', ''), COALESCE(e.body ->> '$.eventTime', ''), COALESCE(e.body ->> '$.resource.type', ''),
            COALESCE(e.body ->> '$.resource.name', ''), COALESCE(e.body ->> '$.resource.id', ''), COALESCE(e.body ->> '$.subject.name', ''),
            COALESCE(e.body ->> '$.action.type', '')
     FROM ${NEW_RANGE} JOIN main.audit_events e ON e.pos > ${AFTER_THROUGH} AND e.pos <= ${SEALED_END}`,
  // In key order: a sorted insert touches each b-tree page once.
  `WITH new AS MATERIALIZED (
     SELECT h.org, f.pos, f.resource_id, f.event_time, f.id FROM ${NEW_RANGE} JOIN lookup.audit_fields f ON f.pos > ${AFTER_THROUGH} AND f.pos <= ${SEALED_END})
   INSERT OR IGNORE INTO lookup.audit_lookup (org, key, pos)
     SELECT org, 'r:' || resource_id, pos FROM new UNION ALL
     SELECT org, 't:' || event_time, pos FROM new UNION ALL
     SELECT org, 'i:' || id, pos FROM new ORDER BY 1, 2, 3`,
  `INSERT INTO lookup.lookup_through (org, org_no, seq, hash, pruned)
     SELECT h.org, h.org_no, h.sealed_seq, h.last_hash, COALESCE(p.up_to_seq, 0) FROM main.audit_heads h LEFT JOIN main.audit_prunes p ON p.org = h.org WHERE true
     ON CONFLICT (org) DO UPDATE SET org_no = excluded.org_no, seq = excluded.seq, hash = excluded.hash, pruned = excluded.pruned
     WHERE (org_no, seq, pruned) IS NOT (excluded.org_no, excluded.seq, excluded.pruned)`,
];

/**
 * An org's events as audit filters read them, `base` being its first pos (its number times
 * ORG_SPAN): each event row (e) joined by pos to its fields (f), which the lookup file holds for
 * sealed events only (the store brings it up to date first), with its hash from its seal. The
 * lookups by id and time name the candidates; one resource's events are read through its lookup
 * entries (l) in pos order, so a page of them, newest or oldest first, reads that page only.
 */
export function auditLayout(base: number): AuditLayout {
  const pos = (filter: AuditFilter) => (filter.resourceId !== undefined && filter.id === undefined ? 'l.pos' : 'f.pos');
  return {
    dialect: 'sqlite',
    columns: (p, filter) =>
      `${p.add(filter.org)} AS org, e.pos - ${p.add(base)} AS seq, f.id, e.context, f.event_time, f.resource_type, f.resource_name, f.resource_id,
       f.subject_name, f.action_type, ${sealHashAt('e.pos')} AS hash, e.body`,
    from: (filter) =>
      pos(filter) === 'l.pos'
        ? 'lookup.audit_lookup l JOIN lookup.audit_fields f ON f.pos = l.pos JOIN audit_events e ON e.pos = f.pos'
        : 'lookup.audit_fields f JOIN audit_events e ON e.pos = f.pos',
    column: (name) => (name === 'context' ? 'e.context' : `f.${name}`),
    range: (p, filter) => [`${pos(filter)} > ${p.add(base + (filter.afterSeq ?? 0))}`, `${pos(filter)} <= ${p.add(base + (filter.throughSeq ?? ORG_SPAN - 1))}`],
    narrow: (p, filter) => {
      // `range` adds its parameters after the org's.
      const lookup = (range: () => string) => `f.pos IN (SELECT pos FROM lookup.audit_lookup WHERE org = ${p.add(filter.org)} AND ${range()})`;
      const { id, resourceId, from, to } = filter;
      if (id !== undefined) return [lookup(() => `key = ${p.add(`i:${id}`)}`)];
      if (resourceId !== undefined) return [`l.org = ${p.add(filter.org)}`, `l.key = ${p.add(`r:${resourceId}`)}`];
      // Keys of times sort between 't:' and 't;' (the next character after ':').
      if (from !== undefined || to !== undefined) return [lookup(() => `key >= ${p.add(`t:${from ?? ''}`)} AND key ${to === undefined ? `< 't;'` : `<= ${p.add(`t:${to}`)}`}`)];
      return [];
    },
    order: pos,
  };
}
