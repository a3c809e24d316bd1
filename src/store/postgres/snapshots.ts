// PostgreSQL snapshots live in the database itself (keel_snapshots and keel_snapshot_rows, each
// row of every Keel table as JSON), so every Keel process on it sees the same ones. A snapshot is
// read in one REPEATABLE READ transaction (one committed state, taken while others write); a
// restore empties the tables and fills them from it in one transaction, which other processes'
// reads see at its commit, whole.
// A restore leaves the audit tables and the log lines as they are (see store/snapshots.ts).
import type pg from 'pg';
import { isRewound, storableSnapshotName, snapshotExists, snapshotNotFound, withLiveKeys, type RestoredOrg, type SnapshotInfo, type Snapshots } from '../snapshots.js';
import type { NewAuditEvent } from '../types.js';
import { pendingInsert } from './statements.js';

const SETUP_LOCK = 0x6b65656d; // next to the migration lock
const OWN_TABLES = ['keel_migrations', 'keel_snapshots', 'keel_snapshot_rows', 'keel_cache_epoch', 'keel_cache_changes', 'keel_cache_leases'];

/**
 * Keel's tables in the current schema (whatever the migrations made), snapshots' own excepted, and
 * the registry's: its content is addressed by digest and kept apart from the items, as the files
 * beside SQLite are (docs/registry.md, "Snapshots, reset, export and quotas").
 */
export async function keelTables(client: pg.PoolClient): Promise<string[]> {
  const { rows } = await client.query(
    `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' AND NOT (table_name = ANY($1)) AND table_name NOT LIKE 'registry\\_%' ORDER BY table_name`,
    [OWN_TABLES],
  );
  return rows.map((r) => r.table_name as string);
}

/**
 * The orgs with a row of the given tables that the snapshot holds differently (or not at all, either
 * way), each with the chain position the snapshot reflects (its head and the events still pending
 * then; 0 for an org made since). Keys count only when made since: one revoked since stays revoked.
 */
async function changedOrgs(client: pg.PoolClient, name: string, tables: string[]): Promise<RestoredOrg[]> {
  const orgs = new Set<string>();
  for (const table of tables) {
    const { rows: hasOrg } = await client.query("SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1 AND column_name = 'org'", [table]);
    if (!hasOrg.length) continue;
    const saved = `SELECT row FROM keel_snapshot_rows WHERE snapshot = $1 AND tbl = $2`;
    const current = `SELECT to_jsonb(t) FROM "${table}" t`;
    const differ = table === 'service_account_keys' ? `(${current} EXCEPT ${saved})` : `(${current} EXCEPT ${saved}) UNION ALL (${saved} EXCEPT ${current})`;
    const { rows } = await client.query(`SELECT DISTINCT d.row->>'org' AS org FROM (${differ}) AS d(row)`, [name, table]);
    for (const r of rows) orgs.add(r.org as string);
  }
  const { rows } = await client.query(
    `SELECT o.org,
       COALESCE((SELECT (row->>'last_seq')::bigint FROM keel_snapshot_rows WHERE snapshot = $1 AND tbl = 'audit_heads' AND row->>'org' = o.org), 0)
       + (SELECT COUNT(*) FROM keel_snapshot_rows WHERE snapshot = $1 AND tbl = 'audit_pending' AND row->>'org' = o.org) AS position,
       -- The snapshot's head event still at its place in the current chain (or pruned from it by
       -- retention): the same chain. Otherwise a reset since began the chain anew.
       NOT EXISTS (SELECT 1 FROM keel_snapshot_rows h WHERE h.snapshot = $1 AND h.tbl = 'audit_heads' AND h.row->>'org' = o.org AND (h.row->>'last_seq')::bigint > 0)
       OR EXISTS (
         SELECT 1 FROM keel_snapshot_rows h
         JOIN keel_snapshot_rows s ON s.snapshot = $1 AND s.tbl = 'audit_events' AND s.row->>'org' = o.org AND s.row->>'seq' = h.row->>'last_seq'
         WHERE h.snapshot = $1 AND h.tbl = 'audit_heads' AND h.row->>'org' = o.org
           AND (EXISTS (SELECT 1 FROM audit_events m WHERE m.org = o.org AND m.seq = (h.row->>'last_seq')::bigint AND m.id = s.row->>'id')
             OR (SELECT up_to_seq FROM audit_prunes p WHERE p.org = o.org) >= (h.row->>'last_seq')::bigint)
       ) AS same
     FROM unnest($2::text[]) AS o(org) ORDER BY o.org`,
    [name, [...orgs]],
  );
  return rows.map((r) => (r.same ? { org: r.org as string, position: Number(r.position) } : { org: r.org as string, position: Number(r.position), earlierChain: true }));
}

/** Takes the keys that no longer exist out of the restored service accounts' lists. */
async function dropRevokedKeys(client: pg.PoolClient): Promise<void> {
  const live = new Set((await client.query('SELECT key_name FROM service_account_keys')).rows.map((r) => r.key_name as string));
  const { rows } = await client.query("SELECT org, gvc, name, data FROM resources WHERE kind = 'serviceaccount'");
  for (const account of rows) {
    const kept = withLiveKeys(account.data as Record<string, unknown>, live);
    if (kept) await client.query("UPDATE resources SET data = $1 WHERE org = $2 AND kind = 'serviceaccount' AND gvc = $3 AND name = $4", [kept, account.org, account.gvc, account.name]);
  }
}

export class PostgresSnapshots implements Snapshots {
  private ready?: Promise<void>;

  constructor(
    private readonly pool: pg.Pool,
    private readonly hooks: {
      /** After a restore committed: drop what processes remember of the old state. */
      replaced(): Promise<void>;
      /** Chains the orgs' committed pending events (a restore's own). */
      chain(orgs: string[]): Promise<void>;
    },
  ) {}

  /** Creates the snapshot tables on first use (once per database, whichever process comes first). */
  private setup(): Promise<void> {
    this.ready ??= this.inTransaction('READ COMMITTED', async (client) => {
      await client.query('SELECT pg_advisory_xact_lock($1)', [SETUP_LOCK]);
      await client.query(`
        CREATE TABLE IF NOT EXISTS keel_snapshots (name TEXT PRIMARY KEY, created TEXT NOT NULL, size BIGINT NOT NULL, schema_version INTEGER NOT NULL);
        CREATE TABLE IF NOT EXISTS keel_snapshot_rows (snapshot TEXT NOT NULL, tbl TEXT NOT NULL, row JSONB NOT NULL);
        CREATE INDEX IF NOT EXISTS keel_snapshot_rows_of ON keel_snapshot_rows (snapshot, tbl);`);
    }).catch((err) => {
      this.ready = undefined;
      throw err;
    });
    return this.ready;
  }

  private async inTransaction<T>(isolation: 'READ COMMITTED' | 'REPEATABLE READ', fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    const client = await this.pool.connect();
    try {
      await client.query(`BEGIN ISOLATION LEVEL ${isolation}`);
      const result = await fn(client);
      await client.query('COMMIT');
      return result;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      throw err;
    } finally {
      client.release();
    }
  }

  async save(name: string): Promise<SnapshotInfo> {
    storableSnapshotName(name);
    await this.setup();
    const created = new Date().toISOString();
    const size = await this.inTransaction('REPEATABLE READ', async (client) => {
      const inserted = await client.query(
        'INSERT INTO keel_snapshots (name, created, size, schema_version) SELECT $1, $2, 0, MAX(version) FROM keel_migrations ON CONFLICT (name) DO NOTHING',
        [name, created],
      );
      if (inserted.rowCount === 0) throw snapshotExists(name);
      for (const table of await keelTables(client)) {
        await client.query(`INSERT INTO keel_snapshot_rows (snapshot, tbl, row) SELECT $1, $2, to_jsonb(t) FROM "${table}" t`, [name, table]);
      }
      const { rows } = await client.query(
        'UPDATE keel_snapshots SET size = (SELECT COALESCE(SUM(pg_column_size(row)), 0) FROM keel_snapshot_rows WHERE snapshot = $1) WHERE name = $1 RETURNING size',
        [name],
      );
      return Number(rows[0].size);
    });
    return { name, created, size };
  }

  async restore(name: string, record: (restored: RestoredOrg[]) => NewAuditEvent[]): Promise<RestoredOrg[]> {
    let restored: RestoredOrg[] = [];
    let events: NewAuditEvent[] = [];
    await this.copy(name, isRewound, async (client, tables) => {
      restored = await changedOrgs(client, name, tables);
      // Keys made since the snapshot go with the rest; keys revoked since are not brought back.
      await client.query("DELETE FROM service_account_keys k WHERE NOT EXISTS (SELECT 1 FROM keel_snapshot_rows s WHERE s.snapshot = $1 AND s.tbl = 'service_account_keys' AND s.row->>'key_name' = k.key_name)", [name]);
      return (table) => table !== 'service_account_keys';
    }, async (client) => {
      await dropRevokedKeys(client);
      events = record(restored);
      if (events.length) {
        const insert = pendingInsert(events, 1);
        await client.query(insert.sql, insert.values);
      }
    });
    await this.hooks.chain([...new Set(events.map((e) => e.org))]);
    return restored;
  }

  async replaceAll(name: string): Promise<void> {
    await this.copy(name, () => true);
  }

  /**
   * Empties the chosen tables and fills them from the snapshot in one transaction: `before` runs
   * first (and may leave out tables it handled itself), `after` last, both inside it. Writers wait
   * for it (the tables are locked against writes, not reads).
   */
  private async copy(
    name: string,
    chosen: (table: string) => boolean,
    before?: (client: pg.PoolClient, tables: string[]) => Promise<(table: string) => boolean>,
    after?: (client: pg.PoolClient) => Promise<void>,
  ): Promise<void> {
    storableSnapshotName(name);
    await this.setup();
    await this.inTransaction('READ COMMITTED', async (client) => {
      const { rows } = await client.query('SELECT s.schema_version, (SELECT MAX(version) FROM keel_migrations) AS current FROM keel_snapshots s WHERE s.name = $1', [name]);
      if (!rows[0]) throw snapshotNotFound(name);
      if (rows[0].schema_version !== rows[0].current) throw new Error(`snapshot '${name}' was taken at schema version ${rows[0].schema_version}, this database is at ${rows[0].current}`);
      const tables = (await keelTables(client)).filter(chosen);
      // In the order writers take them (an item, then its tags and keys), so that waiting for a
      // writer never becomes a deadlock with it.
      const lockOrder = [...tables].sort((a, b) => Number(b === 'resources') - Number(a === 'resources'));
      await client.query(`LOCK TABLE ${lockOrder.map((t) => `"${t}"`).join(', ')} IN EXCLUSIVE MODE`);
      const copied = before ? await before(client, tables) : () => true;
      // DELETE rather than TRUNCATE: cheaper for the sizes a test instance has, and readers keep
      // seeing the old state (MVCC) until the commit shows them the restored one, whole.
      for (const table of tables.filter(copied)) await client.query(`DELETE FROM "${table}"`);
      for (const table of tables.filter(copied)) {
        await client.query(`INSERT INTO "${table}" SELECT (jsonb_populate_record(NULL::"${table}", row)).* FROM keel_snapshot_rows WHERE snapshot = $1 AND tbl = $2`, [name, table]);
      }
      await after?.(client);
    });
    await this.hooks.replaced();
  }

  async list(): Promise<SnapshotInfo[]> {
    await this.setup();
    const { rows } = await this.pool.query("SELECT name, created, size FROM keel_snapshots WHERE name NOT LIKE '.%' ORDER BY name");
    return rows.map((r) => ({ name: r.name as string, created: r.created as string, size: Number(r.size) }));
  }

  async delete(name: string): Promise<void> {
    storableSnapshotName(name);
    await this.setup();
    await this.inTransaction('READ COMMITTED', async (client) => {
      const { rowCount } = await client.query('DELETE FROM keel_snapshots WHERE name = $1', [name]);
      if (rowCount === 0) throw snapshotNotFound(name);
      await client.query('DELETE FROM keel_snapshot_rows WHERE snapshot = $1', [name]);
    });
  }
}
