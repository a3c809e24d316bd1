import { join } from 'node:path';
import { PostgresStore } from './postgres/store.js';
import { SqliteStore } from './sqlite/store.js';
import type { Store } from './types.js';

/** A postgres:// URL selects PostgreSQL; otherwise an SQLite file in the data directory. */
export async function openStore(options: { databaseUrl?: string; dataDir: string }): Promise<Store> {
  if (options.databaseUrl && /^postgres(ql)?:\/\//.test(options.databaseUrl)) return PostgresStore.open(options.databaseUrl);
  return new SqliteStore(options.databaseUrl && options.databaseUrl !== '' ? options.databaseUrl : join(options.dataDir, 'keel.db'));
}
