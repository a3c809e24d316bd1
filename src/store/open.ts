import { join } from 'node:path';
import { maskedUrl } from '../config.js';
import type { Store } from './types.js';

export type StoreLocation = { dialect: 'postgres'; url: string } | { dialect: 'sqlite'; file: string };

/** A postgres:// URL selects PostgreSQL; otherwise an SQLite file in the data directory. */
export function storeLocation(options: { databaseUrl?: string; dataDir: string }): StoreLocation {
  if (options.databaseUrl && /^postgres(ql)?:\/\//.test(options.databaseUrl)) return { dialect: 'postgres', url: options.databaseUrl };
  return { dialect: 'sqlite', file: options.databaseUrl && options.databaseUrl !== '' ? options.databaseUrl : join(options.dataDir, 'keel.db') };
}

/** The location as a person reads it: the SQLite file, or the PostgreSQL URL without its password. */
export function describeStore(location: StoreLocation): string {
  return location.dialect === 'sqlite' ? `SQLite ${location.file}` : `PostgreSQL ${maskedUrl(location.url)}`;
}

/** `say`: told what a slow first start is doing, for a person watching. */
export async function openStore(options: { databaseUrl?: string; dataDir: string; readCacheMb?: number; readLeaseMs?: number }, say?: (line: string) => void): Promise<Store> {
  const location = storeLocation(options);
  // Each backend's driver is loaded only when it is the one in use.
  if (location.dialect === 'postgres') return (await import('./postgres/store.js')).PostgresStore.open(location.url, { readCacheMb: options.readCacheMb, readLeaseMs: options.readLeaseMs, say });
  return new (await import('./sqlite/store.js')).SqliteStore(location.file);
}
