// Direct SQL on a test Keel's database, for tests that play an attacker editing rows behind its back.
import Database from 'better-sqlite3';
import { join } from 'node:path';
import pg from 'pg';
import { ORG_SPAN } from '../../src/store/sqlite/lookup.js';
import type { TestKeel } from './keel.js';

export async function rawExec(k: TestKeel, sql: string, params: unknown[] = []): Promise<number> {
  if (k.config.databaseUrl) {
    const client = new pg.Client({ connectionString: k.config.databaseUrl });
    await client.connect();
    try {
      let i = 0;
      const result = await client.query(sql.replace(/\?/g, () => `$${++i}`), params);
      return result.rowCount ?? 0;
    } finally {
      await client.end();
    }
  }
  const db = new Database(join(k.config.dataDir, 'keel.db'));
  try {
    return db.prepare(sql).run(...params).changes;
  } finally {
    db.close();
  }
}

/** SQLite's condition for an org's event at a seq (parameters: org, seq): its row is placed by its org's number. */
export const SQLITE_EVENT_AT = `pos = (SELECT org_no FROM audit_heads WHERE org = ?) * ${ORG_SPAN} + ?`;

/** Rewrites the body of an org's event at `seq`, or deletes the event (`body` undefined), as an attacker with the database would. */
export function tamperWithEvent(k: TestKeel, org: string, seq: number, body?: string): Promise<number> {
  const row = k.config.databaseUrl ? 'org = ? AND seq = ?' : SQLITE_EVENT_AT;
  return body === undefined ? rawExec(k, `DELETE FROM audit_events WHERE ${row}`, [org, seq]) : rawExec(k, `UPDATE audit_events SET body = ? WHERE ${row}`, [body, org, seq]);
}
