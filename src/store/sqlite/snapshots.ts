// SQLite snapshots: files in the data directory's snapshots/ folder. A snapshot is SQLite's online
// backup of the events file (the audit lookup file is derived from it and rebuilt after a
// restore); restoring copies every table back from it in one write transaction, so readers see
// the old state or the new one, never a mix.
import type Database from 'better-sqlite3';
import { existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { storableSnapshotName, snapshotExists, snapshotNotFound, type SnapshotInfo, type Snapshots } from '../snapshots.js';

/** How long a restore waits for the write lock another connection (the housekeeping thread) holds. */
const LOCK_WAIT_MS = 10_000;
const ALL_PAGES = 0x7fffffff;

export interface SqliteAccess {
  /** The database file (snapshots live next to it). */
  file: string;
  /** A connection to copy from (backups read it). */
  reader: Database.Database;
  /** Runs `fn` on the writer connection with no transaction of this process open or starting. */
  exclusive<T>(fn: (db: Database.Database) => Promise<T>): Promise<T>;
  /** After a restore committed: drop what the process remembers and tell whoever follows the store. */
  replaced(): Promise<void>;
}

export class SqliteSnapshots implements Snapshots {
  private readonly dir: string;

  constructor(private readonly access: SqliteAccess) {
    this.dir = join(dirname(access.file), 'snapshots');
  }

  private path(name: string): string {
    return join(this.dir, `${storableSnapshotName(name)}.db`);
  }

  async save(name: string): Promise<SnapshotInfo> {
    const target = this.path(name);
    if (existsSync(target)) throw snapshotExists(name);
    mkdirSync(this.dir, { recursive: true });
    // Written under a temporary name and renamed: a snapshot file is complete or absent.
    const partial = join(this.dir, `.${name}.${process.pid}.partial`);
    rmSync(partial, { force: true });
    try {
      // Every page in one step, so one read transaction: the copy is of one committed state.
      await this.access.reader.backup(partial, { progress: () => ALL_PAGES });
      if (existsSync(target)) throw snapshotExists(name);
      renameSync(partial, target);
    } finally {
      rmSync(partial, { force: true });
    }
    return this.info(name, target);
  }

  async restore(name: string): Promise<void> {
    const source = this.path(name);
    if (!existsSync(source)) throw snapshotNotFound(name);
    await this.access.exclusive(async (db) => {
      db.prepare('ATTACH ? AS snap').run(source);
      try {
        const schema = (at: string) => db.prepare(`SELECT MAX(version) FROM ${at}.keel_migrations`).pluck().get() as number;
        if (schema('snap') !== schema('main')) throw new Error(`snapshot '${name}' was taken at schema version ${schema('snap')}, this database is at ${schema('main')}`);
        const tables = (db.prepare("SELECT name FROM main.sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name <> 'keel_migrations' ORDER BY name").pluck().all() as string[]);
        await begin(db);
        try {
          for (const table of tables) {
            const columns = (db.prepare(`SELECT name FROM pragma_table_info(?, 'main')`).pluck().all(table) as string[]).map((c) => `"${c}"`).join(', ');
            db.prepare(`DELETE FROM main."${table}"`).run();
            db.prepare(`INSERT INTO main."${table}" (${columns}) SELECT ${columns} FROM snap."${table}"`).run();
          }
          db.prepare('COMMIT').run();
        } catch (err) {
          if (db.inTransaction) db.prepare('ROLLBACK').run();
          throw err;
        }
      } finally {
        db.prepare('DETACH snap').run();
      }
    });
    await this.access.replaced();
  }

  async list(): Promise<SnapshotInfo[]> {
    if (!existsSync(this.dir)) return [];
    return readdirSync(this.dir)
      .filter((f) => f.endsWith('.db') && !f.startsWith('.'))
      .map((f) => this.info(f.slice(0, -3), join(this.dir, f)))
      .sort((a, b) => a.name.localeCompare(b.name));
  }

  async delete(name: string): Promise<void> {
    const target = this.path(name);
    if (!existsSync(target)) throw snapshotNotFound(name);
    rmSync(target);
  }

  private info(name: string, file: string): SnapshotInfo {
    const stat = statSync(file);
    return { name, created: stat.mtime.toISOString(), size: stat.size };
  }
}

/** BEGIN IMMEDIATE, waiting while another connection holds the write lock (the writer does not wait by itself). */
async function begin(db: Database.Database): Promise<void> {
  const deadline = Date.now() + LOCK_WAIT_MS;
  for (;;) {
    try {
      db.prepare('BEGIN IMMEDIATE').run();
      return;
    } catch (err) {
      if ((err as { code?: string }).code !== 'SQLITE_BUSY' || Date.now() > deadline) throw err;
      await delay(2);
    }
  }
}
