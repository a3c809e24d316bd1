// Test-only: a resources table on SQLite (temp file) or PostgreSQL (own schema), rows inserted the way
// the store keeps them (data without links; one resource_tags row per tag), and compiled queries run on it.
import Database from 'better-sqlite3';
import pg from 'pg';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { compileQuery, type Query } from '../../src/query/index.js';
import { migrations } from '../../src/store/migrations.js';
import { SqlParams, type Dialect } from '../../src/store/sql.js';
import { createTestSchema, postgresAvailable } from '../support/postgres.js';

export const ORG = 'acme';

export interface Row {
  item: Record<string, unknown>;
  gvc?: string;
  /** Defaults to ORG, the org every query runs in. */
  org?: string;
}

export interface TestDb {
  dialect: Dialect;
  insert(kind: string, rows: Row[]): Promise<void>;
  clear(): Promise<void>;
  /** One page of compiled query results: the stored data objects and their GVCs, in order. */
  run(query: Query, options?: { after?: string; limit?: number }): Promise<Row[]>;
  /** The plan of that same statement (EXPLAIN QUERY PLAN / EXPLAIN), one line per step. */
  explain(query: Query, options?: { limit?: number }): Promise<string>;
  /** One statement with dialect placeholders; the rows it returns, if any. */
  raw(sql: string, values?: unknown[]): Promise<Array<Record<string, unknown>>>;
  close(): Promise<void>;
}

function statement(dialect: Dialect, query: Query, options: { after?: string; limit?: number }) {
  const params = new SqlParams(dialect);
  const org = params.add(ORG);
  const kind = params.add(query.kind);
  // As lists run it: a tag equality may drive the scan (a join, on PostgreSQL).
  const { where, orderBy, join = '' } = compileQuery(query, params, { org: ORG, after: options.after, drive: true });
  const sql = `SELECT r.data, r.gvc FROM resources r ${join} WHERE r.org = ${org} AND r.kind = ${kind} AND (${where}) ORDER BY ${orderBy} LIMIT ${params.add(options.limit ?? 1000)}`;
  return { sql, values: params.values };
}

function rowValues(kind: string, { item, gvc = '', org = ORG }: Row) {
  const { links: _links, ...data } = item;
  const name = String(item.name);
  const id = String(item.id ?? `${kind}-${gvc}-${name}`);
  const created = String(item.created ?? '2025-01-01T00:00:00.000Z');
  const resource = [org, kind, gvc, name, id, Number(item.version ?? 1), created, String(item.lastModified ?? created), JSON.stringify({ ...data, id })];
  const tags = Object.entries((item.tags ?? {}) as Record<string, unknown>).map(([key, value]) => [id, org, kind, gvc, name, key, String(value)]);
  return { resource, tags };
}

const INSERT_RESOURCE = 'INSERT INTO resources (org, kind, gvc, name, id, version, created, last_modified, data) VALUES';
const INSERT_TAG = 'INSERT INTO resource_tags (id, org, kind, gvc, name, key, value) VALUES';

export async function openSqlite(): Promise<TestDb> {
  const dir = mkdtempSync(join(tmpdir(), 'keel-query-'));
  const db = new Database(join(dir, 'test.db'));
  db.pragma('journal_mode = WAL');
  db.exec(migrations[0].sql.sqlite);
  const insertResource = db.prepare(`${INSERT_RESOURCE} (?, ?, ?, ?, ?, ?, ?, ?, ?)`);
  const insertTag = db.prepare(`${INSERT_TAG} (?, ?, ?, ?, ?, ?, ?)`);
  const insertAll = db.transaction((kind: string, rows: Row[]) => {
    for (const row of rows) {
      const { resource, tags } = rowValues(kind, row);
      insertResource.run(...resource);
      for (const tag of tags) insertTag.run(...tag);
    }
  });
  return {
    dialect: 'sqlite',
    async insert(kind, rows) {
      insertAll(kind, rows);
    },
    async clear() {
      db.exec('DELETE FROM resources; DELETE FROM resource_tags;');
    },
    async run(query, options = {}) {
      const { sql, values } = statement('sqlite', query, options);
      return (db.prepare(sql).all(...values) as Array<{ data: string; gvc: string }>).map((r) => ({ item: JSON.parse(r.data), gvc: r.gvc }));
    },
    async explain(query, options = {}) {
      const { sql, values } = statement('sqlite', query, options);
      return (db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(...values) as Array<{ detail: string }>).map((r) => r.detail).join('\n');
    },
    async raw(sql, values = []) {
      const stmt = db.prepare(sql);
      if (stmt.reader) return stmt.all(...values) as Array<Record<string, unknown>>;
      stmt.run(...values);
      return [];
    },
    async close() {
      db.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export async function openPostgres(): Promise<TestDb> {
  const schema = await createTestSchema('keel_query');
  const client = new pg.Client({ connectionString: schema.url });
  await client.connect();
  await client.query(migrations[0].sql.postgres);
  const placeholders = (rows: unknown[][]) => {
    let n = 0;
    return rows.map((r) => `(${r.map(() => `$${++n}`).join(', ')})`).join(', ');
  };
  return {
    dialect: 'postgres',
    async insert(kind, rows) {
      const all = rows.map((row) => rowValues(kind, row));
      // Batches keep each statement under PostgreSQL's 65535 parameters.
      for (let i = 0; i < all.length; i += 500) {
        const batch = all.slice(i, i + 500);
        const resources = batch.map((r) => r.resource);
        await client.query(`${INSERT_RESOURCE} ${placeholders(resources)}`, resources.flat());
        const tags = batch.flatMap((r) => r.tags);
        if (tags.length > 0) await client.query(`${INSERT_TAG} ${placeholders(tags)}`, tags.flat());
      }
    },
    async clear() {
      await client.query('DELETE FROM resources; DELETE FROM resource_tags;');
    },
    async run(query, options = {}) {
      const { sql, values } = statement('postgres', query, options);
      const { rows } = await client.query<{ data: Record<string, unknown>; gvc: string }>(sql, values);
      return rows.map((r) => ({ item: r.data, gvc: r.gvc }));
    },
    async explain(query, options = {}) {
      const { sql, values } = statement('postgres', query, options);
      return (await client.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${sql}`, values)).rows.map((r) => r['QUERY PLAN']).join('\n');
    },
    async raw(sql, values = []) {
      return (await client.query(sql, values)).rows;
    },
    async close() {
      await client.end();
      await schema.drop();
    },
  };
}

const postgresUp = await postgresAvailable();

/** The backends every SQL test runs on; PostgreSQL is skipped (with the notice) when it is not reachable. */
export const BACKENDS: Array<{ dialect: Dialect; skip: string | false; open(): Promise<TestDb> }> = [
  { dialect: 'sqlite', skip: false, open: openSqlite },
  { dialect: 'postgres', skip: postgresUp ? false : 'PostgreSQL is not reachable', open: openPostgres },
];
