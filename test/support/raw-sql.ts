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
