import { PLATFORM_CONTEXT } from '../audit/events.js';
import type { AuditFilter, AuditRecord } from './types.js';
import { SqlParams, type Dialect } from './sql.js';
import { ORG_SPAN } from './sqlite/lookup.js';
import { sealHashAt } from './sqlite/seals.js';

export const AUDIT_COLUMNS =
  'org, seq, id, context, event_time, resource_type, resource_name, resource_id, subject_name, action_type, hash, body';

export interface AuditRow {
  org: string;
  seq: number | string;
  id: string;
  context: string;
  event_time: string;
  resource_type: string;
  resource_name: string;
  resource_id: string;
  subject_name: string;
  action_type: string;
  hash: string;
  body: string;
}

export function fromAuditRow(row: AuditRow): AuditRecord {
  return {
    org: row.org,
    seq: Number(row.seq),
    id: row.id,
    context: row.context,
    eventTime: row.event_time,
    resourceType: row.resource_type,
    resourceName: row.resource_name,
    resourceId: row.resource_id,
    subjectName: row.subject_name,
    actionType: row.action_type,
    hash: row.hash,
    body: row.body,
  };
}

/** The columns of an SQLite event row joined with its fields (lookup.ts) and seal (seals.ts); `base` is the org's first pos. */
function sqliteColumns(p: SqlParams, org: string, base: number): string {
  return `${p.add(org)} AS org, e.pos - ${p.add(base)} AS seq, f.id, e.context, f.event_time, f.resource_type, f.resource_name, f.resource_id,
    f.subject_name, f.action_type, ${sealHashAt('e.pos')} AS hash, e.body`;
}

/**
 * The SELECT of an audit filter, in seq order. On SQLite, `base` is the org's first pos (its
 * number times ORG_SPAN): the org's events are the rowids after it, and their fields are in the
 * lookup file, which holds sealed events only (the store brings it up to date first).
 */
export function auditQuery(dialect: Dialect, filter: AuditFilter, base = 0): { sql: string; values: unknown[] } {
  const p = new SqlParams(dialect);
  const sqlite = dialect === 'sqlite';
  const columns = sqlite ? sqliteColumns(p, filter.org, base) : AUDIT_COLUMNS;
  // On SQLite every field but the context is audit_fields' (f), joined to the event row (e) by pos.
  const col = (name: string) => (!sqlite ? name : name === 'context' ? 'e.context' : `f.${name}`);
  const where: string[] = [];
  if (sqlite) {
    where.push(`f.pos > ${p.add(base + (filter.afterSeq ?? 0))}`, `f.pos <= ${p.add(base + (filter.throughSeq ?? ORG_SPAN - 1))}`);
  } else {
    where.push(`org = ${p.add(filter.org)}`);
    if (filter.afterSeq !== undefined) where.push(`seq > ${p.add(filter.afterSeq)}`);
    if (filter.throughSeq !== undefined) where.push(`seq <= ${p.add(filter.throughSeq)}`);
  }
  const eq: Array<[keyof AuditFilter, string]> = [
    ['id', 'id'],
    ['context', 'context'],
    ['resourceType', 'resource_type'],
    ['resourceName', 'resource_name'],
    ['subjectName', 'subject_name'],
    ['actionType', 'action_type'],
  ];
  for (const [field, column] of eq) if (filter[field] !== undefined) where.push(`${col(column)} = ${p.add(filter[field])}`);
  // Lets the planner use the index that holds custom contexts only (migrations 5, 8 and 9).
  if (filter.context !== undefined && filter.context !== PLATFORM_CONTEXT) where.push(`${col('context')} <> '${PLATFORM_CONTEXT}'`);
  if (filter.resourceTypes) where.push(filter.resourceTypes.length ? `${col('resource_type')} IN (${filter.resourceTypes.map((t) => p.add(t)).join(', ')})` : 'FALSE');
  if (filter.resourceId !== undefined) where.push(`${col('resource_id')} = ${p.add(filter.resourceId)}`);
  if (filter.from !== undefined) where.push(`${col('event_time')} >= ${p.add(filter.from)}`);
  if (filter.to !== undefined) where.push(`${col('event_time')} <= ${p.add(filter.to)}`);
  if (sqlite) {
    // The lookups name the candidates; the conditions above still hold each row to the filter.
    // `range` adds its parameters after the org's (SQLite's are positional).
    const lookup = (range: () => string) => `f.pos IN (SELECT pos FROM lookup.audit_lookup WHERE org = ${p.add(filter.org)} AND ${range()})`;
    const { id, resourceId, from, to } = filter;
    if (id !== undefined) where.push(lookup(() => `key = ${p.add(`i:${id}`)}`));
    else if (resourceId !== undefined) where.push(lookup(() => `key = ${p.add(`r:${resourceId}`)}`));
    else if (from !== undefined || to !== undefined) {
      // Keys of times sort between 't:' and 't;' (the next character after ':').
      where.push(lookup(() => `key >= ${p.add(`t:${from ?? ''}`)} AND key ${to === undefined ? `< 't;'` : `<= ${p.add(`t:${to}`)}`}`));
    }
  }
  const from = sqlite ? 'lookup.audit_fields f JOIN audit_events e ON e.pos = f.pos' : 'audit_events';
  const sql = `SELECT ${columns} FROM ${from} WHERE ${where.join(' AND ')} ORDER BY ${sqlite ? 'f.pos' : 'seq'} LIMIT ${p.add(filter.limit)}`;
  return { sql, values: p.values };
}
