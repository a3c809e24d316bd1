import { PLATFORM_CONTEXT } from '../audit/events.js';
import type { AuditFilter, AuditRecord } from './types.js';
import { SqlParams, type Dialect } from './sql.js';

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

/**
 * Where a backend keeps its audit events, as far as a filter needs to know: the shared conditions
 * below are written against it. Parameters are added in the order their SQL appears (SQLite's are
 * positional): the columns', the seq range's, the shared conditions', then `narrow`'s.
 */
export interface AuditLayout {
  dialect: Dialect;
  /** The SELECT list, with AuditRow's names. */
  columns(p: SqlParams, filter: AuditFilter): string;
  /** The tables, which take no parameters. */
  from(filter: AuditFilter): string;
  /** A filter field's column (AuditRow's name) as this layout's expression. */
  column(name: string): string;
  /** Conditions for the filter's org and its seq range (afterSeq, throughSeq). */
  range(p: SqlParams, filter: AuditFilter): string[];
  /** Conditions that only name candidates through an index of this layout's own: the shared ones still hold every row to the filter. */
  narrow(p: SqlParams, filter: AuditFilter): string[];
  /** The expression that orders events by seq. */
  order(filter: AuditFilter): string;
}

/** The SELECT of an audit filter over `layout`, in seq order (newest first if it asks). */
export function auditQuery(layout: AuditLayout, filter: AuditFilter): { sql: string; values: unknown[] } {
  const p = new SqlParams(layout.dialect);
  const col = layout.column;
  const columns = layout.columns(p, filter);
  const where = layout.range(p, filter);
  const eq: Array<[keyof AuditFilter, string]> = [
    ['id', 'id'],
    ['context', 'context'],
    ['resourceType', 'resource_type'],
    ['resourceName', 'resource_name'],
    ['subjectName', 'subject_name'],
    ['actionType', 'action_type'],
  ];
  for (const [field, column] of eq) if (filter[field] !== undefined) where.push(`${col(column)} = ${p.add(filter[field])}`);
  if (filter.exceptActionType !== undefined) where.push(`${col('action_type')} <> ${p.add(filter.exceptActionType)}`);
  // Lets the planner use the index that holds custom contexts only (migrations 5, 8 and 9).
  if (filter.context !== undefined && filter.context !== PLATFORM_CONTEXT) where.push(`${col('context')} <> '${PLATFORM_CONTEXT}'`);
  if (filter.resourceTypes) where.push(filter.resourceTypes.length ? `${col('resource_type')} IN (${filter.resourceTypes.map((t) => p.add(t)).join(', ')})` : 'FALSE');
  if (filter.resourceNames) where.push(filter.resourceNames.length ? `${col('resource_name')} IN (${filter.resourceNames.map((n) => p.add(n)).join(', ')})` : 'FALSE');
  if (filter.resourceId !== undefined) where.push(`${col('resource_id')} = ${p.add(filter.resourceId)}`);
  if (filter.from !== undefined) where.push(`${col('event_time')} >= ${p.add(filter.from)}`);
  if (filter.to !== undefined) where.push(`${col('event_time')} <= ${p.add(filter.to)}`);
  where.push(...layout.narrow(p, filter));
  const sql = `SELECT ${columns} FROM ${layout.from(filter)} WHERE ${where.join(' AND ')} ORDER BY ${layout.order(filter)}${filter.newestFirst ? ' DESC' : ''} LIMIT ${p.add(filter.limit)}`;
  return { sql, values: p.values };
}
