import pg from 'pg';
import { setTimeout as delay } from 'node:timers/promises';
import { alreadyExists, overBudget, staleVersion } from '../conflicts.js';
import { migrations } from '../migrations.js';
import { fromRow, itemKeyString, itemsOf, positionedList, replicaToken, RESOURCE_COLUMNS, tagRows, type ResourceRow } from '../rows.js';
import { NeedsLocking, OptimisticTx, type Remembered } from './optimistic.js';
import { AUDIT_LAYOUT, getOn, inTransaction, pendingInsert, position, prepared, updateCtes, type Queryable } from './statements.js';
import { SqlParams } from '../sql.js';
import { auditQuery, AUDIT_COLUMNS, fromAuditRow, type AuditRow } from '../audit-sql.js';
import { enoughOf, fromLogRow, LINE_BYTES, INSERT_COLUMNS, labelValuesQuery, LOG_USAGE, logsQuery, logValues, oldestLogsQuery, pruneLogsQuery, usageOf, type LogRow } from '../logs-sql.js';
import type { AtPosition, AuditFilter, AuditRecord, ItemKey, KeyRecord, ListRequest, ReplicaTokenRecord, LogFilter, LogLabel, LogLine, NewAuditEvent, Store, StoredItem, Tx } from '../types.js';
import { randomUUID } from 'node:crypto';
import { replacements, type Snapshots } from '../snapshots.js';
import { keelTables, PostgresSnapshots } from './snapshots.js';
import { DEFAULT_LEASE_MS, LeaseWaits } from './leases.js';
import { ReadCache, type ReadAt } from './read-cache.js';

// A write runs first as an optimistic transaction (optimistic.ts: one statement, applied only if
// the item is still at the version read), otherwise in a READ COMMITTED transaction: creates rely
// on the primary key, updates on `version = expected` in the WHERE clause, and reads that guard
// an invariant (a GVC that must exist, a GVC being deleted) lock the row. So several Keel
// processes can share one database.
const MIGRATION_LOCK = 0x6b65656c; // 'keel'
const RETRYABLE = new Set(['40001', '40P01']); // serialization failure, deadlock
const SWEEP_EVERY_MS = 1000;
const SEAL_BATCH = 256;
/** An org's seals start at least this far apart (see Sealer.seal). */
const SEAL_EVERY_MS = 30;
/** Optimistic runs of one transaction that may meet a concurrent change before it locks instead. */
const OPTIMISTIC_ATTEMPTS = 3;
/** Items this process wrote last, kept to start the next change of each without a read. */
const RECENT_ITEMS = 10_000;
/** SQLSTATE of a statement cancelled by statement_timeout. */
const QUERY_CANCELED = '57014';
/** The read cache's bound, in MB, when the setting leaves it out. */
export const DEFAULT_READ_CACHE_MB = 64;
/** How soon a lost notice connection is opened again (and again after each failed try). */
const LISTEN_RETRY_MS = 1000;

/** An item (or NULLs) with its org's position and the read cache's, from one statement's snapshot. */
const GET_ITEM_AT = `SELECT p.*, ${RESOURCE_COLUMNS}, octet_length(r.data::text) AS keel_size
  FROM (SELECT ${position('$1')}, (SELECT n FROM keel_cache_epoch) AS keel_cache_n) p
  LEFT JOIN resources r ON r.org = $1 AND r.kind = $2 AND r.gvc = $3 AND r.name = $4`;

type PositionedRow = ResourceRow & Record<string, unknown> & { keel_seq: string | null; keel_pending: string[] | null };

export class PostgresStore implements Store {
  readonly dialect = 'postgres' as const;
  private readonly pool: pg.Pool;

  /** Reads outside transactions get their own connections: a transaction that needs a read (an
   * authorization decision, a reconciler's listing) then never waits for a connection held by
   * another transaction that waits in turn. */
  private readonly reads: pg.Pool;
  private readonly sealer: Sealer;
  private readonly recent = new Map<string, Remembered>();
  /** The seal that chains a committed event, until its event is forgotten. */
  private readonly sealing = new WeakMap<NewAuditEvent, Promise<void>>();
  private readonly sweeper: NodeJS.Timeout;
  /** Connections for lists with a budget: each carries the statement_timeout last set on it, which no other read should get. */
  private readonly lists: pg.Pool;
  /**
   * Connections for audit and log reads (history, audit pages, replay chunks, Loki reads): pages of
   * events with their bodies, or thousands of log lines. On `reads` they would take the connections
   * that item reads and authentication wait for, and every caller's GET would queue behind a swarm's replays.
   */
  private readonly pages: pg.Pool;
  /** The statement_timeout each of those connections has. */
  private readonly timeouts = new WeakMap<pg.PoolClient, number>();
  readonly snapshots: Snapshots;
  /** Hears other processes' notices that the stored state was replaced (see replaced()). */
  private listener?: pg.Client;
  private readonly instance = randomUUID();
  private schema = '';
  /** A writer's wait for the other processes' read leases (leases.ts). */
  private readonly waits: LeaseWaits;
  private leaseMs = DEFAULT_LEASE_MS;
  private closing = false;
  /** Items served from memory at the database's current position (read-cache.ts). */
  readonly cache: ReadCache;
  /** The read cache's catch-ups also keep authentication and authorization current. */
  get accessFeed(): ReadCache {
    return this.cache;
  }

  private constructor(pool: pg.Pool, reads: pg.Pool, lists: pg.Pool, pages: pg.Pool, cacheMb: number) {
    this.pool = pool;
    this.reads = reads;
    this.lists = lists;
    this.pages = pages;
    this.cache = new ReadCache(reads, cacheMb * 1024 * 1024);
    this.snapshots = new PostgresSnapshots(pool, { replaced: () => this.replaced(), chain: async (orgs) => void (await Promise.all(orgs.map((org) => this.sealer.seal(org)))) });
    this.sealer = new Sealer(pool);
    this.waits = new LeaseWaits(pool);
    // Events left pending by a process that died between commit and sealing are sealed by whoever sweeps first.
    this.sweeper = setInterval(() => void this.sealer.sweep().catch(() => {}), SWEEP_EVERY_MS);
    this.sweeper.unref();
  }

  /** `say`: told what a slow start is doing (migrations, waiting for another process's), for a person watching. */
  static async open(url: string, options: { poolSize?: number; readCacheMb?: number; readLeaseMs?: number; say?: (line: string) => void } = {}): Promise<PostgresStore> {
    const poolSize = options.poolSize ?? 10;
    const pool = new pg.Pool({ connectionString: url, max: poolSize });
    const reads = new pg.Pool({ connectionString: url, max: Math.max(2, Math.ceil(poolSize / 2)) });
    const lists = new pg.Pool({ connectionString: url, max: Math.max(2, Math.ceil(poolSize / 2)) });
    const pages = new pg.Pool({ connectionString: url, max: Math.max(2, Math.ceil(poolSize / 2)) });
    for (const p of [pool, reads, lists, pages]) p.on('error', () => {}); // an idle client's error is reported on its next use
    const store = new PostgresStore(pool, reads, lists, pages, options.readCacheMb ?? DEFAULT_READ_CACHE_MB);
    await store.migrate(options.say);
    await store.listen(url);
    store.leaseMs = options.readLeaseMs ?? DEFAULT_LEASE_MS;
    store.cache.holdLease(store.instance, store.schema, store.leaseMs);
    return store;
  }

  private async listen(url: string): Promise<void> {
    const listener = new pg.Client({ connectionString: url });
    listener.on('error', () => {});
    await listener.connect();
    this.schema = (await listener.query('SELECT current_schema() AS s')).rows[0].s as string;
    listener.on('notification', (message) => {
      if (message.channel === 'keel_cache_ack') {
        const payload = message.payload ?? '';
        if (payload.startsWith(`${this.schema} `)) this.waits.heard(payload.slice(this.schema.length + 1));
        return;
      }
      const [schema, instance] = (message.payload ?? '').split(' ');
      if (schema === this.schema && instance !== this.instance) this.forget();
    });
    await listener.query('LISTEN keel_replaced');
    await listener.query('LISTEN keel_cache_ack');
    this.listener = listener;
    // A lost connection is opened again. Meanwhile writers find acknowledgements by checking again,
    // and other processes' replacements reach only the caches with their own expiry (a second).
    let lost = false;
    const again = () => {
      if (lost || this.closing) return;
      lost = true;
      void listener.end().catch(() => {});
      const retry = () => {
        if (!this.closing) this.listen(url).catch(() => setTimeout(retry, LISTEN_RETRY_MS).unref());
      };
      setTimeout(retry, LISTEN_RETRY_MS).unref();
    };
    listener.on('error', again);
    listener.on('end', again);
  }

  private forget(): void {
    this.recent.clear();
    this.cache.clear();
    replacements.emit('replaced', this);
  }

  /**
   * After a restore or reset committed: forgets what this process remembers of the old state and
   * tells the other Keel processes on the database (NOTIFY), which do the same.
   */
  async replaced(): Promise<void> {
    this.forget();
    await this.pool.query('SELECT pg_notify($1, $2)', ['keel_replaced', `${this.schema} ${this.instance}`]);
    await this.settle();
  }

  /**
   * Before a change is answered: every live read lease has applied it (leases.ts). Should the
   * database not answer, every lease that could miss the change runs out within its length.
   */
  private async settle(): Promise<void> {
    try {
      await this.waits.settle();
    } catch {
      await delay(Math.max(this.leaseMs, DEFAULT_LEASE_MS));
    }
  }

  private async migrate(say?: (line: string) => void): Promise<void> {
    await inTransaction(this.pool, async (client) => {
      if (!(await client.query('SELECT pg_try_advisory_xact_lock($1) AS got', [MIGRATION_LOCK])).rows[0].got) {
        say?.('waiting for another Keel process to finish preparing the database');
        await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
      }
      await client.query('CREATE TABLE IF NOT EXISTS keel_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied TEXT NOT NULL)');
      const done = new Set((await client.query('SELECT version FROM keel_migrations')).rows.map((r) => Number(r.version)));
      const due = migrations.filter((step) => !done.has(step.version));
      if (due.length) say?.(done.size ? `bringing the database schema up to date (${due.length} migrations)` : `creating Keel's tables in an empty database (${due.length} migrations)`);
      for (const step of due) {
        await client.query(step.sql.postgres);
        await client.query('INSERT INTO keel_migrations VALUES ($1, $2, $3)', [step.version, step.name, new Date().toISOString()]);
      }
    });
  }

  async get(key: ItemKey): Promise<StoredItem | undefined> {
    return this.cache.get(key, () => getOn(this.reads, key));
  }

  getAt(key: ItemKey, mark?: number): AtPosition<StoredItem | undefined> | Promise<AtPosition<StoredItem | undefined>> {
    return this.cache.getAt(key, this.loadAt, mark);
  }

  private readonly loadAt = async (key: ItemKey): Promise<ReadAt> => {
    const values = [key.org, key.kind, key.gvc, key.name];
    const rows = await this.readAt(key.org, async (db) => (await db.query<PositionedRow>(prepared(GET_ITEM_AT, values))).rows);
    const row = rows.value[0];
    return { value: row.id === null ? undefined : fromRow(row), seq: rows.seq, at: Number(row.keel_cache_n), size: Number(row.keel_size ?? 0) };
  };

  async list(request: ListRequest): Promise<StoredItem[]> {
    const { sql, values } = listStatement(request, false);
    return (await this.onListConnection(request.budgetMs, (db) => db.query<ResourceRow>(sql, values))).rows.map(fromRow);
  }

  async listAt(request: ListRequest, mark?: number): Promise<AtPosition<StoredItem[]>> {
    return this.cache.listAt(request, () => this.listFromDatabase(request), mark);
  }

  private async listFromDatabase(request: ListRequest): Promise<AtPosition<StoredItem[]>> {
    const { sql, values } = listStatement(request, true);
    const run = (db: Queryable) => db.query<PositionedRow>(sql, values);
    const { value, seq } = await this.readAt(request.org, async (db, held) => {
      if (!held) return (await this.onListConnection(request.budgetMs, run)).rows;
      // Inside the held transaction, the budget is set for that transaction alone.
      if (request.budgetMs !== undefined) await db.query(`SET LOCAL statement_timeout = ${Math.floor(request.budgetMs)}`);
      return (await this.budgeted(request.budgetMs, () => run(db))).rows;
    });
    return { value: itemsOf(value), seq };
  }

  /**
   * Runs a read whose rows carry the org's position (keel_seq, keel_pending) and finds the exact
   * position it reflects. Each statement sees one snapshot: the changes it shows are those whose
   * events are chained up to keel_seq, plus those whose events it sees pending. With none pending,
   * keel_seq is exact. Otherwise, those pending events must be chained directly after keel_seq for a
   * single seq to name what was read, while any writer may commit and any process may seal meanwhile;
   * so the read runs again, in a transaction that first locks the org's chain head (which every
   * seal locks): no seal runs while it holds it, so the read's keel_seq is the head and the events it
   * sees pending are then chained, in that same transaction, exactly at keel_seq + 1 .. keel_seq + k.
   * Writers are not held up (their events only wait in audit_pending a little longer).
   */
  private async readAt<R extends { keel_seq: string | null; keel_pending: string[] | null }>(
    org: string,
    read: (db: Queryable, held: boolean) => Promise<R[]>,
  ): Promise<AtPosition<R[]>> {
    const first = await read(this.reads, false);
    if (first[0].keel_pending === null) return { value: first, seq: Number(first[0].keel_seq ?? 0) };
    const client = await this.reads.connect();
    try {
      await client.query('BEGIN');
      // The org has an event, so its head row is wanted anyway (see Sealer.sealBatch).
      await client.query(prepared("INSERT INTO audit_heads (org, last_seq, last_hash) VALUES ($1, 0, '') ON CONFLICT (org) DO NOTHING", [org]));
      await client.query(prepared('SELECT 1 FROM audit_heads WHERE org = $1 FOR UPDATE', [org]));
      const rows = await read(client, true);
      const seq = Number(rows[0].keel_seq ?? 0);
      const pending = rows[0].keel_pending ?? [];
      if (pending.length > 0) await this.sealer.sealChosen(client, org, pending);
      await client.query('COMMIT');
      return { value: rows, seq: seq + pending.length };
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      throw err;
    } finally {
      client.release();
    }
  }

  /** Runs a list statement on a connection of `lists` when it has a budget (see budgeted()), else on `reads`. */
  private async onListConnection<T>(budgetMs: number | undefined, run: (db: Queryable) => Promise<T>): Promise<T> {
    if (budgetMs === undefined) return run(this.reads);
    const client = await this.lists.connect();
    try {
      // Set once per connection (and again only if the budget changes): no round trip per list.
      if (this.timeouts.get(client) !== budgetMs) {
        await client.query(`SET statement_timeout = ${Math.floor(budgetMs)}`);
        this.timeouts.set(client, budgetMs);
      }
      return await this.budgeted(budgetMs, () => run(client));
    } finally {
      client.release();
    }
  }

  /** A statement under statement_timeout: its cancellation is the over-budget answer. */
  private async budgeted<T>(budgetMs: number | undefined, run: () => Promise<T>): Promise<T> {
    try {
      return await run();
    } catch (err) {
      if (budgetMs !== undefined && (err as { code?: string }).code === QUERY_CANCELED) throw overBudget(budgetMs);
      throw err;
    }
  }

  async findKey(keyName: string): Promise<KeyRecord | undefined> {
    const { rows } = await this.reads.query(prepared('SELECT key_name, org, service_account, secret_hash, created FROM service_account_keys WHERE key_name = $1', [keyName]));
    const row = rows[0];
    return row && { keyName: row.key_name, org: row.org, serviceAccount: row.service_account, secretHash: row.secret_hash, created: row.created };
  }

  async findSignIn(what: string, key: string): Promise<string | undefined> {
    const { rows } = await this.reads.query(prepared('SELECT data FROM signin_records WHERE what = $1 AND key = $2 AND (expires = 0 OR expires > $3)', [what, key, Date.now()]));
    return rows[0]?.data as string | undefined;
  }

  async putReplicaToken(r: ReplicaTokenRecord): Promise<void> {
    await this.pool.query('INSERT INTO replica_tokens VALUES ($1, $2, $3, $4, $5, $6, $7)', [r.tokenHash, r.org, r.gvc, r.identity, r.scope, r.replica, r.created]);
  }

  async findReplicaToken(tokenHash: string): Promise<ReplicaTokenRecord | undefined> {
    const { rows } = await this.reads.query(prepared('SELECT token_hash, org, gvc, identity, scope, replica, created FROM replica_tokens WHERE token_hash = $1', [tokenHash]));
    return rows[0] && replicaToken(rows[0]);
  }

  async deleteReplicaTokens(scope: string, replica?: string): Promise<void> {
    if (replica === undefined) await this.pool.query('DELETE FROM replica_tokens WHERE scope = $1', [scope]);
    else await this.pool.query('DELETE FROM replica_tokens WHERE scope = $1 AND replica = $2', [scope, replica]);
    await this.settle();
  }

  async orgs(): Promise<string[]> {
    const { rows } = await this.reads.query("SELECT name FROM resources WHERE kind = 'org' ORDER BY name");
    return rows.map((r) => r.name as string);
  }

  async orgsNaming(link: string): Promise<string[]> {
    const { rows } = await this.reads.query("SELECT DISTINCT org FROM resources WHERE kind IN ('group', 'policy') AND strpos(data::text, $1) > 0", [JSON.stringify(link)]);
    return rows.map((r) => r.org as string);
  }

  /** Chains the org's committed-but-pending events first, so a change readers can see always has its event in the chain. */
  private async sealPending(org: string): Promise<void> {
    const { rows } = await this.reads.query(prepared('SELECT 1 FROM audit_pending WHERE org = $1 LIMIT 1', [org]));
    if (rows.length) await this.sealer.seal(org);
  }

  async audit(filter: AuditFilter): Promise<AuditRecord[]> {
    // Up to a seq read from the head, everything is sealed already.
    if (filter.throughSeq === undefined) await this.sealPending(filter.org);
    const { sql, values } = auditQuery(AUDIT_LAYOUT, filter);
    const { rows } = await this.pages.query<AuditRow>(prepared(sql, values));
    return rows.map(fromAuditRow);
  }

  async auditHead(org: string) {
    await this.sealPending(org);
    const { rows } = await this.reads.query(prepared(
      `SELECT h.last_seq, h.last_hash, p.up_to_seq, p.hash AS pruned_hash
       FROM (SELECT $1::text AS org) o LEFT JOIN audit_heads h ON h.org = o.org LEFT JOIN audit_prunes p ON p.org = o.org`,
      [org]));
    const r = rows[0];
    return { seq: Number(r.last_seq ?? 0), hash: r.last_hash ?? '', prunedUpTo: Number(r.up_to_seq ?? 0), prunedHash: r.pruned_hash ?? '' };
  }

  async auditPosition(org: string): Promise<number> {
    const { rows } = await this.reads.query(prepared('SELECT last_seq FROM audit_heads WHERE org = $1', [org]));
    return Number(rows[0]?.last_seq ?? 0);
  }

  async auditOrgs(): Promise<string[]> {
    const { rows } = await this.reads.query('SELECT org FROM audit_heads ORDER BY org');
    return rows.map((r) => r.org as string);
  }

  async pruneAudit(org: string, options: { before?: string; keep?: number }): Promise<number> {
    await this.sealer.seal(org);
    return this.lockingTransaction(async (tx) => (tx as PgTx).pruneAudit(org, options));
  }

  async logs(filter: LogFilter): Promise<LogLine[]> {
    const { sql, values } = logsQuery('postgres', filter);
    const { rows } = await this.pages.query<LogRow>(sql, values);
    return rows.map(fromLogRow);
  }

  async logLabelValues(org: string, label: LogLabel, from: string, to: string, limit: number): Promise<string[]> {
    const { sql, values } = labelValuesQuery('postgres', org, label, from, to, limit);
    const { rows } = await this.pages.query(sql, values);
    return rows.map((r) => r.value as string);
  }

  async pruneLogs(org: string, before: string, max: number): Promise<number> {
    const { sql, values } = pruneLogsQuery('postgres', org, before, max);
    return inTransaction(this.pool, async (client) => {
      const { rows } = await client.query<{ bytes: string }>(sql, values);
      await noteLogBytes(client, org, -rows.reduce((a, r) => a + Number(r.bytes), 0));
      return rows.length;
    });
  }

  async logUsage(): Promise<Array<{ org: string; bytes: number; rows: number }>> {
    const { rows } = await this.pool.query<{ org: string; bytes: string; n: string }>(LOG_USAGE);
    return rows.map((r) => ({ org: r.org, bytes: Number(r.bytes), rows: Number(r.n) }));
  }

  async trimLogs(org: string, bytes: number, max: number): Promise<{ lines: number; bytes: number }> {
    const { sql, values } = oldestLogsQuery('postgres', org, max);
    const { rows } = await this.pool.query<{ id: string; bytes: string }>(sql, values);
    const n = enoughOf(rows, bytes);
    if (n === 0) return { lines: 0, bytes: 0 };
    // What this statement removed (a line another process removed meanwhile is counted once, by it).
    return inTransaction(this.pool, async (client) => {
      const gone = await client.query<{ bytes: string }>(`DELETE FROM log_lines WHERE id = ANY($1::bigint[]) RETURNING ${LINE_BYTES.postgres} AS bytes`, [rows.slice(0, n).map((r) => r.id)]);
      const removed = gone.rows.reduce((a, r) => a + Number(r.bytes), 0);
      await noteLogBytes(client, org, -removed);
      return { lines: gone.rows.length, bytes: removed };
    });
  }

  async foldLogUsage(org: string): Promise<void> {
    // READ COMMITTED: rows added while this runs are not deleted, and keep counting.
    await inTransaction(this.pool, async (client) => {
      const { rows } = await client.query<{ bytes: string }>('DELETE FROM log_lines_usage WHERE org = $1 RETURNING bytes', [org]);
      await noteLogBytes(client, org, rows.reduce((a, r) => a + Number(r.bytes), 0));
    });
  }

  async ping(): Promise<void> {
    await this.reads.query('SELECT 1');
  }

  async isEmpty(): Promise<boolean> {
    const { rows } = await this.reads.query("SELECT 1 FROM resources WHERE kind = 'org' LIMIT 1");
    return rows.length === 0;
  }

  /**
   * Runs `fn` optimistically first (see OptimisticTx): most changes then need two round trips and
   * no lock. When it cannot, or keeps meeting concurrent changes, `fn` runs again in a locking
   * READ COMMITTED transaction.
   */
  async transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
    let fresh = false; // the first attempt may start from what this process last wrote
    for (let attempt = 1; attempt <= OPTIMISTIC_ATTEMPTS; attempt++) {
      const tx = new OptimisticTx(this.pool, fresh ? undefined : this.recent);
      let result: T;
      try {
        result = await fn(tx);
      } catch (err) {
        if (tx.refused || err instanceof NeedsLocking) break;
        // An answer (a 409 for a version, say) decided on a remembered item is confirmed on a fresh read.
        if (tx.usedRecent && !fresh) {
          fresh = true;
          continue;
        }
        throw err;
      }
      if (tx.refused) break;
      // So is "nothing to change": only a write checks that the remembered item is still current.
      if (tx.usedRecent && !tx.updates) {
        fresh = true;
        continue;
      }
      // Watched from before the commit: a seal under way may chain these events the moment it lands.
      this.sealer.watch(tx.appended);
      let outcome: Awaited<ReturnType<OptimisticTx['commit']>>;
      try {
        outcome = await tx.commit();
      } finally {
        if (outcome! !== 'committed') this.sealer.unwatch(tx.appended);
      }
      if (outcome === 'needs-locking') break;
      if (outcome === 'conflict') {
        fresh = true;
        continue;
      }
      this.remember(tx.written);
      this.sealAfterCommit(tx.appended);
      if (tx.updates) await this.settle();
      return result;
    }
    return this.lockingTransaction(fn);
  }

  private remember(written: Remembered | undefined): void {
    if (!written) return;
    if (this.recent.size >= RECENT_ITEMS) this.recent.clear();
    this.recent.set(itemKeyString(written.item), written);
  }

  private async lockingTransaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      const client = await this.pool.connect();
      const appended: NewAuditEvent[] = [];
      let result: T;
      try {
        await client.query('BEGIN');
        result = await fn(transactionOn(client, appended));
        this.sealer.watch(appended);
        await client.query('COMMIT');
      } catch (err) {
        this.sealer.unwatch(appended);
        await client.query('ROLLBACK').catch(() => {});
        if (attempt < 5 && RETRYABLE.has((err as { code?: string }).code ?? '')) continue;
        throw err;
      } finally {
        client.release();
      }
      this.sealAfterCommit(appended);
      await this.settle();
      return result;
    }
  }

  /**
   * Gives committed events their place in the chain (and each its seq, when this process's sealer
   * chained it: they are watched from before the commit) after the change is answered: the event is
   * already durable in audit_pending, and audit reads chain what is pending first. Seals run one
   * at a time per org, so under load each takes the events of many writers. If sealing fails, the
   * change still happened; the sweeper chains its events later.
   */
  private sealAfterCommit(events: NewAuditEvent[]): void {
    if (events.length === 0) return;
    const orgs = [...new Set(events.map((e) => e.org))];
    const sealed = Promise.all(orgs.map((org) => this.sealer.seal(org)))
      .then(() => {})
      .catch(() => {}) // see above
      .finally(() => this.sealer.unwatch(events));
    for (const event of events) this.sealing.set(event, sealed);
  }

  async chained(events: readonly NewAuditEvent[]): Promise<void> {
    await Promise.all(events.map((event) => this.sealing.get(event)));
  }

  async close(): Promise<void> {
    this.closing = true;
    clearInterval(this.sweeper);
    await this.cache.close();
    await this.listener?.end().catch(() => {});
    await this.sealer.idle();
    await Promise.all([this.pool.end(), this.reads.end(), this.lists.end(), this.pages.end()]);
  }
}

/** A list's statement; `positioned`: as positionedList() has it, with the org's position read by the same statement. */
function listStatement(request: ListRequest, positioned: boolean): { sql: string; values: unknown[] } {
  const params = new SqlParams('postgres');
  const org = params.add(request.org);
  const scope = [`r.org = ${org}`, `r.kind = ${params.add(request.kind)}`];
  if (request.gvc !== undefined) scope.push(`r.gvc = ${params.add(request.gvc)}`);
  const { where, orderBy, join = '' } = request.build(params);
  const list = `SELECT ${RESOURCE_COLUMNS} FROM resources r ${join} WHERE ${scope.join(' AND ')} AND (${where}) ORDER BY ${orderBy} LIMIT ${params.add(request.limit)}`;
  return { sql: positioned ? positionedList(position(org), list, orderBy) : list, values: params.values };
}

async function writeTags(client: pg.PoolClient, item: StoredItem): Promise<void> {
  await client.query('DELETE FROM resource_tags WHERE id = $1', [item.id]);
  const tags = tagRows(item);
  if (tags.length === 0) return;
  await client.query(
    `INSERT INTO resource_tags (id, org, kind, gvc, name, key, value)
     SELECT $1, $2, $3, $4, $5, k, v FROM unnest($6::text[], $7::text[]) AS t(k, v)`,
    [item.id, item.org, item.kind, item.gvc, item.name, tags.map((t) => t[0]), tags.map((t) => t[1])],
  );
}

type PgTx = Tx & { pruneAudit(org: string, options: { before?: string; keep?: number }): Promise<number> };

/** `appended` collects the events the transaction appended. */
function transactionOn(client: pg.PoolClient, appended: NewAuditEvent[]): PgTx {
  return {
    get: (key, lock) => getOn(client, key, lock),
    async insert(item) {
      await client.query('SAVEPOINT keel_insert');
      try {
        await client.query(
          'INSERT INTO resources (org, kind, gvc, name, id, version, created, last_modified, data) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)',
          [item.org, item.kind, item.gvc, item.name, item.id, item.version, item.created, item.lastModified, item.data],
        );
        await client.query('RELEASE SAVEPOINT keel_insert');
      } catch (err) {
        await client.query('ROLLBACK TO SAVEPOINT keel_insert');
        if ((err as { code?: string }).code === '23505') throw alreadyExists(item);
        throw err;
      }
      await writeTags(client, item);
    },
    async update(item, expectedVersion, options) {
      const update = updateCtes(item, expectedVersion, options?.tagsUnchanged ?? false);
      const { rows } = await client.query(prepared(`WITH ${update.sql} SELECT count(*)::int AS n FROM updated`, update.values));
      if (rows[0].n === 0) throw staleVersion(item);
    },
    async writeStatus(key, data) {
      await client.query('UPDATE resources SET data = $1 WHERE org = $2 AND kind = $3 AND gvc = $4 AND name = $5', [data, key.org, key.kind, key.gvc, key.name]);
    },
    async delete(key) {
      const { rows } = await client.query('DELETE FROM resources WHERE org = $1 AND kind = $2 AND gvc = $3 AND name = $4 RETURNING id', [
        key.org,
        key.kind,
        key.gvc,
        key.name,
      ]);
      if (rows[0]) await client.query('DELETE FROM resource_tags WHERE id = $1', [rows[0].id]);
    },
    async clearAll() {
      const tables = await keelTables(client);
      await client.query(`TRUNCATE ${tables.map((t) => `"${t}"`).join(', ')}`);
      // Events appended earlier in this transaction went with the rest.
      appended.length = 0;
    },
    async tryLock(name) {
      // A transaction-scoped advisory lock: released by COMMIT or ROLLBACK, never leaked.
      const { rows } = await client.query('SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0)) AS ok', [name]);
      return rows[0].ok === true;
    },
    async countInGvc(org, kind, gvc) {
      const { rows } = await client.query('SELECT COUNT(*)::int AS n FROM resources WHERE org = $1 AND kind = $2 AND gvc = $3', [org, kind, gvc]);
      return rows[0].n;
    },
    async putKey(k) {
      await client.query('INSERT INTO service_account_keys VALUES ($1, $2, $3, $4, $5)', [k.keyName, k.org, k.serviceAccount, k.secretHash, k.created]);
    },
    async deleteKeys(org, serviceAccount, keep) {
      await client.query('DELETE FROM service_account_keys WHERE org = $1 AND service_account = $2 AND NOT (key_name = ANY($3::text[]))', [org, serviceAccount, keep]);
    },
    async putSignIn(what, key, data, expires, keep) {
      await client.query('DELETE FROM signin_records WHERE what = $1 AND expires <> 0 AND expires <= $2', [what, Date.now()]);
      await client.query(
        `INSERT INTO signin_records (what, key, data, expires) VALUES ($1, $2, $3, $4) ON CONFLICT (what, key) DO ${keep ? 'NOTHING' : 'UPDATE SET data = EXCLUDED.data, expires = EXCLUDED.expires'}`,
        [what, key, data, expires],
      );
    },
    async takeSignIn(what, key) {
      const { rows } = await client.query('DELETE FROM signin_records WHERE what = $1 AND key = $2 RETURNING data, expires', [what, key]);
      const row = rows[0];
      return row && (Number(row.expires) === 0 || Number(row.expires) > Date.now()) ? (row.data as string) : undefined;
    },
    async appendAudit(event) {
      // No lock shared with the org's other writers: the event waits in audit_pending, and the
      // sealer chains it right after this transaction commits (see Sealer).
      const insert = pendingInsert([event], 1);
      await client.query(prepared(insert.sql, insert.values));
      appended.push(event);
    },
    async appendLogs(lines) {
      if (lines.length === 0) return;
      // One statement for every line: a column of values per array.
      const rows = lines.map(logValues);
      const columns = INSERT_COLUMNS.map((_, i) => rows.map((row) => row[i]));
      await client.query(
        `INSERT INTO log_lines (${INSERT_COLUMNS.join(', ')}) SELECT * FROM unnest(${INSERT_COLUMNS.map((_, i) => `$${i + 1}::text[]`).join(', ')})`,
        columns,
      );
      for (const [org, bytes] of usageOf(lines)) await noteLogBytes(client, org, bytes);
    },
    async pruneAudit(org, options) {
      let cutoff = 0;
      if (options.keep !== undefined) {
        const { rows } = await client.query('SELECT last_seq FROM audit_heads WHERE org = $1 FOR UPDATE', [org]);
        cutoff = Math.max(cutoff, Number(rows[0]?.last_seq ?? 0) - options.keep);
      }
      if (options.before !== undefined) {
        const { rows } = await client.query('SELECT MAX(seq) AS seq FROM audit_events WHERE org = $1 AND event_time < $2', [org, options.before]);
        cutoff = Math.max(cutoff, Number(rows[0]?.seq ?? 0));
      }
      const { rows: anchor } = await client.query('SELECT hash FROM audit_events WHERE org = $1 AND seq = $2', [org, cutoff]);
      if (!anchor[0]) return 0;
      const removed = await client.query('DELETE FROM audit_events WHERE org = $1 AND seq <= $2', [org, cutoff]);
      await client.query(
        'INSERT INTO audit_prunes VALUES ($1, $2, $3) ON CONFLICT (org) DO UPDATE SET up_to_seq = excluded.up_to_seq, hash = excluded.hash',
        [org, cutoff, anchor[0].hash],
      );
      return removed.rowCount ?? 0;
    },
  };
}

// Takes the org's pending events that `chosen` names, numbers them after the head in pending_id
// order and chains them with keel_chain (chainHash as an aggregate, migration 10) in that order.
const sealStatement = (chosen: string) => `
  WITH
  head AS (SELECT last_seq, last_hash FROM audit_heads WHERE org = $1 FOR UPDATE),
  taken AS (
    DELETE FROM audit_pending WHERE EXISTS (SELECT 1 FROM head) AND org = $1 AND ${chosen}
    RETURNING pending_id, id, context, event_time, resource_type, resource_name, resource_id, subject_name, action_type, body),
  numbered AS (SELECT h.last_seq + row_number() OVER (ORDER BY t.pending_id) AS seq, h.last_hash AS head_hash, t.* FROM taken t, head h),
  chained AS (SELECT keel_chain(head_hash, seq, body) OVER (ORDER BY seq ROWS UNBOUNDED PRECEDING) AS hash, n.* FROM numbered n),
  appended AS (
    INSERT INTO audit_events (${AUDIT_COLUMNS})
    SELECT $1, seq, id, context, event_time, resource_type, resource_name, resource_id, subject_name, action_type, hash, body FROM chained),
  moved AS (
    UPDATE audit_heads h SET last_seq = tip.seq, last_hash = tip.hash
    FROM (SELECT seq, hash FROM chained ORDER BY seq DESC LIMIT 1) tip WHERE h.org = $1)
  SELECT (SELECT count(*) FROM taken)::int AS sealed, EXISTS (SELECT 1 FROM head) AS chained,
    (SELECT last_seq FROM head) AS base, (SELECT array_agg(id ORDER BY seq) FROM numbered) AS ids`;

/** The oldest $2 pending events (all of them when there are fewer: no $2+1-th to stop before). */
const SEAL_STATEMENT = sealStatement('pending_id < COALESCE((SELECT pending_id FROM audit_pending WHERE org = $1 ORDER BY pending_id OFFSET $2 LIMIT 1), 9223372036854775807)');
/** The pending events whose pending_ids are $2. */
const SEAL_CHOSEN = sealStatement('pending_id = ANY($2::bigint[])');

/**
 * Gives committed pending events their place in each org's hash chain. One seal runs per org at a
 * time in this process, and the lock on the org's audit_heads row makes it one per org across
 * processes; seals therefore commit in seq order, which is what lets a watcher read "seq > last"
 * without missing anything. Callers that arrive while a seal runs share the next one, so under
 * load one statement chains many writers' events (a group commit for the chain).
 */
class Sealer {
  private readonly running = new Map<string, Promise<void>>();
  private readonly queued = new Map<string, Promise<void>>();
  /** When each org's last seal started (performance.now()). */
  private readonly started = new Map<string, number>();
  /** Events of this process's transactions waiting for their seq, by id. */
  private readonly watched = new Map<string, NewAuditEvent>();
  /** Pending events this process's seals took since its last sweep. */
  private takenSinceSweep = 0;

  constructor(private readonly pool: pg.Pool) {}

  watch(events: NewAuditEvent[]): void {
    for (const event of events) this.watched.set(event.id, event);
  }

  unwatch(events: NewAuditEvent[]): void {
    for (const event of events) this.watched.delete(event.id);
  }

  /**
   * Resolves once every event committed for `org` before this call is in the chain. A seal starts
   * once the org's previous one is done and at least SEAL_EVERY_MS after it started: a lone write
   * is sealed at once, while under load each seal takes a few ms of writers' events together.
   */
  seal(org: string): Promise<void> {
    const queued = this.queued.get(org);
    if (queued) return queued;
    const running = this.running.get(org);
    const wait = (this.started.get(org) ?? -Infinity) + SEAL_EVERY_MS - performance.now();
    if (!running && wait <= 0) return this.start(org);
    const next = Promise.all([running?.catch(() => {}), wait > 0 ? delay(wait) : undefined]).then(() => {
      this.queued.delete(org);
      return this.start(org);
    });
    this.queued.set(org, next);
    return next;
  }

  private start(org: string): Promise<void> {
    this.started.set(org, performance.now());
    const run = this.sealAll(org).finally(() => {
      if (this.running.get(org) === run) this.running.delete(org);
    });
    this.running.set(org, run);
    return run;
  }

  /**
   * Seals what any process left pending, then vacuums audit_pending if this process took events
   * from it since the last sweep. The queue's rows are all deleted within moments of their insert,
   * and their space is reused only after a vacuum: without one (autovacuum off) the table grows
   * without end, and autovacuum, where it is on, comes only every minute or more. SKIP_LOCKED: one
   * process's vacuum is enough.
   */
  async sweep(): Promise<void> {
    const { rows } = await this.pool.query('SELECT DISTINCT org FROM audit_pending');
    await Promise.all(rows.map((r) => this.seal(r.org as string)));
    if (this.takenSinceSweep === 0) return;
    this.takenSinceSweep = 0;
    await this.pool.query('VACUUM (SKIP_LOCKED) audit_pending');
  }

  async idle(): Promise<void> {
    await Promise.allSettled([...this.running.values(), ...this.queued.values()]);
  }

  private async sealAll(org: string): Promise<void> {
    while ((await this.sealBatch(org)) === SEAL_BATCH);
  }

  /**
   * One statement, so one round trip and its own transaction: it locks the org's head row (a
   * second sealer, here or in another process, waits and then reads the head the first one left),
   * takes pending events in pending_id order (rows another sealer took meanwhile are skipped),
   * chains them in SQL with chainHash's formula, appends them and moves the head.
   */
  private async sealBatch(org: string): Promise<number> {
    const { sealed, chained } = this.took(await this.pool.query(prepared(SEAL_STATEMENT, [org, SEAL_BATCH])));
    if (chained) return sealed;
    // The org's first event: its chain starts at an empty head.
    await this.pool.query(prepared("INSERT INTO audit_heads (org, last_seq, last_hash) VALUES ($1, 0, '') ON CONFLICT (org) DO NOTHING", [org]));
    return this.sealBatch(org);
  }

  /**
   * Chains exactly the pending events `pendingIds`, right after the head, in a transaction on
   * `client` that holds the org's head row locked (so none of them can have been taken by another seal).
   */
  async sealChosen(client: pg.PoolClient, org: string, pendingIds: string[]): Promise<void> {
    const { sealed } = this.took(await client.query(prepared(SEAL_CHOSEN, [org, pendingIds])));
    if (sealed !== pendingIds.length) throw new Error(`chained ${sealed} of ${pendingIds.length} pending events of ${org} under the head's lock`);
  }

  /** Reads a seal's outcome, giving this process's waiting events their seqs. */
  private took(result: pg.QueryResult): { sealed: number; chained: boolean } {
    const { sealed, chained, base, ids } = result.rows[0] as { sealed: number; chained: boolean; base: string | null; ids: string[] | null };
    this.takenSinceSweep += sealed;
    for (const [i, id] of (ids ?? []).entries()) {
      const event = this.watched.get(id);
      if (event) event.seq = Number(base) + i + 1;
    }
    return { sealed, chained };
  }
}

/** Records a change of an org's bytes of lines, in the client's transaction (an insert: no writer waits on another). */
async function noteLogBytes(client: pg.PoolClient, org: string, bytes: number): Promise<void> {
  if (bytes !== 0) await client.query('INSERT INTO log_lines_usage (org, bytes) VALUES ($1, $2)', [org, bytes]);
}
