// Direct SQL on a test Keel's database, for tests that play an attacker editing rows behind its back.
import Database from 'better-sqlite3';
import { join } from 'node:path';
import pg from 'pg';
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

/** Rewrites the body of an org's event at `seq`, or deletes the event (`body` undefined), as an attacker with the database would. */
export function tamperWithEvent(k: TestKeel, org: string, seq: number, body?: string): Promise<number> {
  // SQLite places an event by its org's number (see src/store/sqlite/lookup.ts).
  const row = k.config.databaseUrl ? 'org = ? AND seq = ?' : 'pos = (SELECT org_no FROM audit_heads WHERE org = ?) * 1099511627776 + ?';
  return body === undefined ? rawExec(k, `DELETE FROM audit_events WHERE ${row}`, [org, seq]) : rawExec(k, `UPDATE audit_events SET body = ? WHERE ${row}`, [body, org, seq]);
}
