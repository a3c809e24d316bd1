// SQLite snapshots: files in the data directory's snapshots/ folder. A snapshot is SQLite's online
// backup of the events file (the audit lookup file is derived from it and rebuilt after a
// replaceAll); restoring copies tables back from it in one write transaction, so readers see the
// old state or the new one, never a mix.
import type Database from 'better-sqlite3';
import { existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { isRewound, storableSnapshotName, snapshotExists, snapshotNotFound, withLiveKeys, type RestoredOrg, type SnapshotInfo, type Snapshots } from '../snapshots.js';
import type { NewAuditEvent } from '../types.js';
import { ORG_SPAN } from './lookup.js';

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
  /** Appends events to their orgs' chains inside the transaction the writer has open. */
  append(events: readonly NewAuditEvent[]): void;
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

  async restore(name: string, record: (restored: RestoredOrg[]) => NewAuditEvent[]): Promise<RestoredOrg[]> {
    let restored: RestoredOrg[] = [];
    await this.copy(name, isRewound, (db, tables) => {
      restored = changedOrgs(db, tables);
      // Keys made since the snapshot go with the rest; keys revoked since are not brought back.
      db.prepare('DELETE FROM main.service_account_keys WHERE key_name NOT IN (SELECT key_name FROM snap.service_account_keys)').run();
      return (table) => table !== 'service_account_keys';
    }, (db) => {
      dropRevokedKeys(db);
      this.access.append(record(restored));
    });
    return restored;
  }

  async replaceAll(name: string): Promise<void> {
    await this.copy(name, () => true);
  }

  /**
   * Copies the chosen tables back from the snapshot in one write transaction: `before` runs first
   * (and may leave out tables it handled itself), `after` last, both inside it.
   */
  private async copy(
    name: string,
    chosen: (table: string) => boolean,
    before?: (db: Database.Database, tables: string[]) => (table: string) => boolean,
    after?: (db: Database.Database) => void,
  ): Promise<void> {
    const source = this.path(name);
    if (!existsSync(source)) throw snapshotNotFound(name);
    await this.access.exclusive(async (db) => {
      db.prepare('ATTACH ? AS snap').run(source);
      try {
        const schema = (at: string) => db.prepare(`SELECT MAX(version) FROM ${at}.keel_migrations`).pluck().get() as number;
        if (schema('snap') !== schema('main')) throw new Error(`snapshot '${name}' was taken at schema version ${schema('snap')}, this database is at ${schema('main')}`);
        const tables = (db.prepare("SELECT name FROM main.sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name <> 'keel_migrations' ORDER BY name").pluck().all() as string[]).filter(chosen);
        await begin(db);
        try {
          const copied = before ? before(db, tables) : () => true;
          for (const table of tables.filter(copied)) {
            const columns = (db.prepare(`SELECT name FROM pragma_table_info(?, 'main')`).pluck().all(table) as string[]).map((c) => `"${c}"`).join(', ');
            db.prepare(`DELETE FROM main."${table}"`).run();
            db.prepare(`INSERT INTO main."${table}" (${columns}) SELECT ${columns} FROM snap."${table}"`).run();
          }
          after?.(db);
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

/**
 * The orgs with a row of the given tables that the snapshot holds differently (or not at all, either
 * way), each with its chain position in the snapshot (0 for an org made since). Keys count only when
 * made since: one revoked since stays revoked, so it changes nothing.
 */
function changedOrgs(db: Database.Database, tables: string[]): RestoredOrg[] {
  const orgs = new Set<string>();
  for (const table of tables) {
    const hasOrg = (db.prepare(`SELECT COUNT(*) FROM pragma_table_info(?, 'main') WHERE name = 'org'`).pluck().get(table) as number) > 0;
    if (!hasOrg) continue;
    const differ = (a: string, b: string) => db.prepare(`SELECT DISTINCT org FROM (SELECT * FROM ${a}."${table}" EXCEPT SELECT * FROM ${b}."${table}")`).pluck().all() as string[];
    for (const org of differ('main', 'snap')) orgs.add(org);
    if (table !== 'service_account_keys') for (const org of differ('snap', 'main')) orgs.add(org);
  }
  // The snapshot's head event still at its place in the current chain (or pruned from it by retention):
  // the same chain. Otherwise a reset since began the chain anew, and the position is not one of it.
  const head = db.prepare(
    `SELECT h.last_seq AS seq,
       h.last_seq = 0
       OR (SELECT m.body FROM main.audit_heads mh JOIN main.audit_events m ON m.pos = mh.org_no * ${ORG_SPAN} + h.last_seq WHERE mh.org = h.org)
          = (SELECT s.body FROM snap.audit_events s WHERE s.pos = h.org_no * ${ORG_SPAN} + h.last_seq)
       OR (SELECT up_to_seq FROM main.audit_prunes p WHERE p.org = h.org) >= h.last_seq AS same
     FROM snap.audit_heads h WHERE h.org = ?`,
  );
  return [...orgs].sort().map((org) => {
    const row = head.get(org) as { seq: number; same: number } | undefined;
    return row && !row.same ? { org, position: row.seq, earlierChain: true } : { org, position: row?.seq ?? 0 };
  });
}

/** Takes the keys that no longer exist out of the restored service accounts' lists. */
function dropRevokedKeys(db: Database.Database): void {
  const live = new Set(db.prepare('SELECT key_name FROM main.service_account_keys').pluck().all() as string[]);
  const accounts = db.prepare("SELECT org, gvc, name, data FROM main.resources WHERE kind = 'serviceaccount'").all() as Array<{ org: string; gvc: string; name: string; data: string }>;
  const write = db.prepare("UPDATE main.resources SET data = ? WHERE org = ? AND kind = 'serviceaccount' AND gvc = ? AND name = ?");
  for (const account of accounts) {
    const kept = withLiveKeys(JSON.parse(account.data), live);
    if (kept) write.run(JSON.stringify(kept), account.org, account.gvc, account.name);
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
