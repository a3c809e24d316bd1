import { randomBytes } from 'node:crypto';
import pg from 'pg';

/**
 * Runs `fn` with a factory of fresh, empty PostgreSQL schemas (URLs selecting them through
 * search_path), all dropped afterwards. Each new schema comes after a CHECKPOINT, so every run
 * starts from the same state: no dirty buffers of earlier runs left to write back, and no timed
 * checkpoint due in the middle of it (a checkpoint restarts that clock).
 */
export async function withBenchSchema<T>(baseUrl: string, fn: (newSchemaUrl: () => Promise<string>) => Promise<T>): Promise<T> {
  const created: string[] = [];
  const admin = new pg.Client({ connectionString: baseUrl });
  await admin.connect();
  try {
    return await fn(async () => {
      const schema = `keel_bench_${randomBytes(5).toString('hex')}`;
      await admin.query(`CREATE SCHEMA ${schema}`);
      created.push(schema);
      await admin.query('CHECKPOINT');
      const url = new URL(baseUrl);
      url.searchParams.set('options', `-c search_path=${schema}`);
      return url.toString();
    });
  } finally {
    for (const schema of created) await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await admin.end();
  }
}
