// The shared audit filter (src/store/audit-sql.ts) over each backend's layout: SQLite's
// parameters are positional, so they must come in the order their placeholders appear, and its
// lookups must name the candidates of the filters they serve.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { auditQuery } from '../../src/store/audit-sql.js';
import { AUDIT_LAYOUT } from '../../src/store/postgres/statements.js';
import { auditLayout, ORG_SPAN } from '../../src/store/sqlite/lookup.js';

const base = 3 * ORG_SPAN;

test('SQLite: a filter by resource walks its lookup entries in order, with every parameter in placeholder order', () => {
  const { sql, values } = auditQuery(auditLayout(base), { org: 'o', resourceId: 'r1', actionType: 'edit', afterSeq: 7, limit: 5 });
  assert.deepEqual(values, ['o', base, base + 7, base + ORG_SPAN - 1, 'edit', 'r1', 'o', 'r:r1', 5]);
  assert.equal(sql.split('?').length - 1, values.length);
  assert.match(sql, /FROM lookup\.audit_lookup l JOIN lookup\.audit_fields f ON f\.pos = l\.pos JOIN audit_events e ON e\.pos = f\.pos WHERE l\.pos > \? AND l\.pos <= \? AND f\.action_type = \? AND f\.resource_id = \? AND l\.org = \? AND l\.key = \? ORDER BY l\.pos LIMIT \?$/);
  const newest = auditQuery(auditLayout(base), { org: 'o', resourceId: 'r1', exceptActionType: 'status', newestFirst: true, limit: 2 });
  assert.deepEqual(newest.values, ['o', base, base, base + ORG_SPAN - 1, 'status', 'r1', 'o', 'r:r1', 2]);
  assert.match(newest.sql, /f\.action_type <> \? AND f\.resource_id = \? AND l\.org = \? AND l\.key = \? ORDER BY l\.pos DESC LIMIT \?$/);
});

test('SQLite: an id takes precedence over a resource, and a time range reads the time keys', () => {
  assert.deepEqual(auditQuery(auditLayout(base), { org: 'o', id: 'e1', resourceId: 'r1', limit: 1 }).values.slice(-3), ['o', 'i:e1', 1]);
  const range = auditQuery(auditLayout(base), { org: 'o', from: '2026-01-01', limit: 1 });
  assert.deepEqual(range.values.slice(-3), ['o', 't:2026-01-01', 1]);
  assert.match(range.sql, /key >= \? AND key < 't;'\)/);
  assert.doesNotMatch(auditQuery(auditLayout(base), { org: 'o', subjectName: 'a', limit: 1 }).sql, /audit_lookup/);
});

test('PostgreSQL: the org and seq range are columns of audit_events, numbered in order', () => {
  const { sql, values } = auditQuery(AUDIT_LAYOUT, { org: 'o', afterSeq: 2, throughSeq: 9, context: 'deploys', resourceId: 'r1', limit: 5 });
  assert.deepEqual(values, ['o', 2, 9, 'deploys', 'r1', 5]);
  assert.match(sql, /FROM audit_events WHERE org = \$1 AND seq > \$2 AND seq <= \$3 AND context = \$4 AND context <> 'cpln' AND resource_id = \$5 ORDER BY seq LIMIT \$6$/);
});
