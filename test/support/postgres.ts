// PostgreSQL for tests: each suite gets its own schema in the test database, dropped afterwards.
// Without a reachable server the PostgreSQL suites are skipped with a notice, unless
// KEEL_REQUIRE_POSTGRES=1 (CI), where an unreachable server fails the run.
import pg from 'pg';
import { randomBytes } from 'node:crypto';

export const PG_TEST_URL = process.env.KEEL_TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const REQUIRED = process.env.KEEL_REQUIRE_POSTGRES === '1';

let reachable: Promise<boolean> | undefined;

/** Resolves true when the test database answers; false (with a visible notice) when it does not and it is optional. */
export function postgresAvailable(): Promise<boolean> {
  reachable ??= (async () => {
    const client = new pg.Client({ connectionString: PG_TEST_URL, connectionTimeoutMillis: 3000 });
    try {
      await client.connect();
      await client.query('SELECT 1');
      return true;
    } catch (err) {
      if (REQUIRED) throw new Error(`PostgreSQL is required (KEEL_REQUIRE_POSTGRES=1) but ${PG_TEST_URL} is not reachable: ${String(err)}`);
      console.log(`# NOTICE: PostgreSQL at ${PG_TEST_URL} is not reachable; PostgreSQL suites are SKIPPED`);
      return false;
    } finally {
      await client.end().catch(() => {});
    }
  })();
  return reachable;
}

/** A fresh, empty schema; `url` selects it through the search_path option. */
export async function createTestSchema(prefix = 'keel_test'): Promise<{ schema: string; url: string; drop(): Promise<void> }> {
  const schema = `${prefix}_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: PG_TEST_URL });
  await admin.connect();
  await admin.query(`CREATE SCHEMA ${schema}`);
  await admin.end();
  const url = new URL(PG_TEST_URL);
  url.searchParams.set('options', `-c search_path=${schema}`);
  return {
    schema,
    url: url.toString(),
    async drop() {
      const c = new pg.Client({ connectionString: PG_TEST_URL });
      await c.connect();
      await c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
      await c.end();
    },
  };
}
