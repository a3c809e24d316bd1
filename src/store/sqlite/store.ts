import Database from 'better-sqlite3';
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { alreadyExists, overBudget, staleVersion } from '../conflicts.js';
import { migrations } from '../migrations.js';
import { fromRow, itemKeyString, itemsOf, Mutex, positionedList, replicaToken, RESOURCE_COLUMNS, tagRows, type ResourceRow } from '../rows.js';
import { SqlParams } from '../sql.js';
import { Housekeeper } from './housekeeper.js';
import { ListWorkers } from './lists.js';
import { auditLayout, LOOKUP_CATCH_UP, lookupFileOf, ORG_SPAN, prepareLookup } from './lookup.js';
import { sealHashAt, sealNew } from './seals.js';
import { chainHash } from '../../audit/chain.js';
import { auditQuery, fromAuditRow, type AuditRow } from '../audit-sql.js';
import { enoughOf, fromLogRow, INSERT_COLUMNS, labelValuesQuery, LOG_USAGE, logsQuery, logValues, oldestLogsQuery, pruneLogsQuery, usageOf, type LogRow } from '../logs-sql.js';
import type { AtPosition, AuditFilter, AuditRecord, ItemKey, KeyRecord, ListRequest, ReplicaTokenRecord, LogFilter, LogLabel, LogLine, NewAuditEvent, Store, StoredItem, Tx } from '../types.js';
import { replacements, type Snapshots } from '../snapshots.js';
import { SqliteSnapshots } from './snapshots.js';

// One writer connection (transactions serialized by a mutex, so an open transaction never
// interleaves with another request's statements) and one reader connection: in WAL mode the
// reader sees only committed data and never waits for the writer.
const OPTIMIZE_EVERY_MS = 60 * 60 * 1000;
const CHECKPOINT_EVERY_MS = 250;
/** WAL frames (pages) a passive checkpoint may leave behind before a RESTART one (about 16 MB). */
const RESTART_FRAMES = 4000;
/** How often the events appended since are sealed and added to the audit lookups (audit reads do it first). */
const LOOKUP_EVERY_MS = 1000;
/** How long the writer waits before trying again for a write lock another connection holds. */
const BUSY_RETRY_MS = 2;
/** The longest the writer gives its housekeeping thread (a RESTART checkpoint, a seal) before it competes for the lock again. */
const RESTART_TURN_MS = 200;
const CACHE_ENTRIES = 10_000;
/** Transactions committed together at most (bounds how long one batch holds the writer). */
const MAX_BATCH = 64;

const INSERT_LOG = `INSERT INTO log_lines (${INSERT_COLUMNS.join(', ')}) VALUES (${INSERT_COLUMNS.map(() => '?').join(', ')})`;
const GET_ITEM = `SELECT ${RESOURCE_COLUMNS} FROM resources r WHERE r.org = ? AND r.kind = ? AND r.gvc = ? AND r.name = ?`;
/** The org's last seq given out: a commit moves it together with the data it changed. */
const POSITION = '(SELECT last_seq FROM audit_heads WHERE org = ?) AS keel_seq';
/** An item (or NULLs) with its org's position, from one statement's snapshot. */
const GET_ITEM_AT = `SELECT p.keel_seq, ${RESOURCE_COLUMNS} FROM (SELECT ${POSITION}) p LEFT JOIN resources r ON r.org = ? AND r.kind = ? AND r.gvc = ? AND r.name = ?`;
/** Audit events inserted by one statement at most. */
const EVENTS_PER_INSERT = 16;
/** An event's row: pos, context, body (its hash and fields come later, see seals.ts and lookup.ts). */
const AUDIT_VALUES = 3;
/** The statement inserting n + 1 events (each placed at its pos, see lookup.ts). */
const INSERT_EVENTS = Array.from({ length: EVENTS_PER_INSERT }, (_, n) => `INSERT INTO audit_events (pos, context, body) VALUES ${Array(n + 1).fill('(?, ?, ?)').join(', ')}`);

/** Thrown by keel_within_budget() to stop a statement past its deadline. */
class BudgetSpent extends Error {}

interface ChainHead {
  /** The org's last seq given out. */
  seq: number;
  /** The org's number: its events are at pos = no * ORG_SPAN + seq. */
  no: number;
}

export class SqliteStore implements Store {
  readonly dialect = 'sqlite' as const;
  private readonly writer: Database.Database;
  private readonly reader: Database.Database;
  private readonly mutex = new Mutex();
  private readonly writerStatements = new Map<string, Database.Statement>();
  private readonly readerStatements = new Map<string, Database.Statement>();
  private readonly optimizer: NodeJS.Timeout;
  /** Checkpoints, seals and audit lookups in a worker thread; an in-memory database keeps them itself. */
  private readonly housekeeper?: Housekeeper;
  private readonly lookupKeeper?: NodeJS.Timeout;
  /** Seals every committed event and brings the audit lookups up to date with them. */
  private readonly catchUpAudit: () => Promise<void>;
  private caughtUpSinceOpen = false;
  /** Org numbers never change once given (see ChainHead.no). */
  private readonly orgNumbers = new Map<string, number>();
  /** Item reads with the position each was read at (see get()). */
  private readonly cache = new Map<string, AtPosition<StoredItem | undefined>>();
  private cachedAt = -1;
  /** Chain heads moved by the batch under way: written once, just before it commits. */
  private chainHeads = new Map<string, ChainHead>();
  /**
   * The batch's events, as the values of their rows, inserted just before it commits: a few
   * multi-row statements cost less than one statement per event. Nothing in a batch reads them back.
   */
  private appendedRows: unknown[] = [];
  private versionChecked = false;
  /**
   * Where lists with a budget run, and apart from them audit reads (history, replays), as the
   * scheduler keeps them in levels of their own (an in-memory database has no file a second
   * connection could open: they run on the reader).
   */
  private readonly lists?: ListWorkers;
  private readonly pages?: ListWorkers;
  /** When the list statement running on the reader must stop (see list()): 0 until its first row. */
  private deadline = 0;
  private budgetMs = Infinity;
  private readonly queue: Array<{ fn: (tx: Tx) => Promise<unknown>; resolve: (value: unknown) => void; reject: (error: unknown) => void }> = [];
  readonly snapshots: Snapshots;

  constructor(file: string) {
    if (file !== ':memory:') mkdirSync(dirname(file), { recursive: true });
    this.writer = new Database(file);
    // First: after a crash, switching to WAL may wait for the lock of whoever recovers the log.
    this.writer.pragma('busy_timeout = 5000');
    this.writer.pragma('journal_mode = WAL');
    this.writer.pragma('synchronous = NORMAL');
    // Checkpoints run on a timer in a worker thread (see housekeeper.ts), not inside whichever commit crosses the WAL threshold.
    this.writer.pragma('wal_autocheckpoint = 0');
    this.migrate();
    const lookupFile = lookupFileOf(file);
    this.stmt(this.writer, 'ATTACH ? AS lookup').run(lookupFile);
    this.writer.pragma('lookup.journal_mode = WAL');
    prepareLookup(this.writer);
    if (file === ':memory:') {
      this.reader = this.writer;
    } else {
      // Detached again: a write transaction of a connection locks every database attached to it.
      this.writer.exec('DETACH lookup');
      this.reader = new Database(file, { readonly: true });
      this.lists = new ListWorkers(file, lookupFile);
      this.pages = new ListWorkers(file, lookupFile);
      this.stmt(this.reader, 'ATTACH ? AS lookup').run(lookupFile);
    }
    this.reader.pragma('busy_timeout = 5000');
    // Lists of an in-memory database run here (see lists.ts for the same check in the list worker).
    // The clock starts at the first row, so waiting for a lock (a checkpoint) does not count.
    this.reader.function('keel_within_budget', { deterministic: false }, () => {
      const now = Date.now();
      if (this.deadline === 0) this.deadline = now + this.budgetMs;
      else if (now > this.deadline) throw new BudgetSpent();
      return 1;
    });
    // The planner needs statistics to choose between the tag index and a name-ordered scan.
    this.writer.pragma('optimize = 0x10002');
    // Skipped, not waited for, when another connection holds the write lock: the next hour's run will do.
    this.optimizer = setInterval(() => void this.mutex.run(async () => void this.writer.pragma('optimize')).catch(() => {}), OPTIMIZE_EVERY_MS);
    this.optimizer.unref();
    if (file === ':memory:') {
      const lookups = this.writer.transaction(() => LOOKUP_CATCH_UP.forEach((sql) => this.stmt(this.writer, sql).run()));
      const seal = { span: ORG_SPAN, chainHash, write: (fn: () => void) => this.writer.transaction(fn)() };
      this.catchUpAudit = () =>
        this.mutex.run(async () => {
          sealNew(this.writer, seal);
          lookups();
        });
      this.lookupKeeper = setInterval(() => void this.catchUpAudit().catch((err) => process.emitWarning(`audit lookup: ${(err as Error).message}`)), LOOKUP_EVERY_MS);
      this.lookupKeeper.unref();
    } else {
      const housekeeper = new Housekeeper(
        file,
        { everyMs: CHECKPOINT_EVERY_MS, restartFrames: RESTART_FRAMES, restartTurnMs: RESTART_TURN_MS, lookupFile, lookupEveryMs: LOOKUP_EVERY_MS },
        (message) => process.emitWarning(`SQLite housekeeping failed: ${message}`),
      );
      this.housekeeper = housekeeper;
      this.catchUpAudit = () => housekeeper.catchUp();
    }
    // From here on a held write lock (a RESTART checkpoint, another process) is waited for in drain(), off the event loop.
    this.writer.pragma('busy_timeout = 0');
    this.snapshots = new SqliteSnapshots({
      file,
      reader: this.reader,
      exclusive: (fn) => this.mutex.run(() => fn(this.writer)),
      replaced: () => this.replaced(),
      append: (events) => {
        for (const event of events) this.append(event);
        this.writeAppended();
      },
    });
  }

  /** Forgets every read and org number kept from the replaced contents (the next audit read rebuilds its lookups). */
  async replaced(): Promise<void> {
    this.cache.clear();
    this.versionChecked = false;
    this.orgNumbers.clear();
    this.caughtUpSinceOpen = false;
    replacements.emit('replaced', this);
  }

  private migrate(): void {
    this.writer.exec('CREATE TABLE IF NOT EXISTS keel_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied TEXT NOT NULL)');
    const done = new Set(this.writer.prepare('SELECT version FROM keel_migrations').all().map((r) => (r as { version: number }).version));
    for (const step of migrations) {
      if (done.has(step.version)) continue;
      this.writer.transaction(() => {
        this.writer.exec(step.sql.sqlite);
        this.writer.prepare('INSERT INTO keel_migrations VALUES (?, ?, ?)').run(step.version, step.name, new Date().toISOString());
      })();
    }
  }

  /** A prepared statement of `db`, by its SQL text (keyed by the text alone: most are literals, whose hash V8 keeps). */
  private stmt(db: Database.Database, sql: string): Database.Statement {
    const statements = db === this.writer ? this.writerStatements : this.readerStatements;
    let s = statements.get(sql);
    if (!s) {
      s = db.prepare(sql);
      statements.set(sql, s);
    }
    return s;
  }

  private getOn(db: Database.Database, key: ItemKey): StoredItem | undefined {
    const row = this.stmt(db, GET_ITEM).get(
      key.org,
      key.kind,
      key.gvc,
      key.name,
    ) as ResourceRow | undefined;
    return row && fromRow(row);
  }

  /**
   * Reads through a cache that lives only as long as the database does not change: SQLite's
   * data_version moves whenever any connection (this process's writer, or another process)
   * commits, and then every cached read is dropped. Cached items are shared: callers must not
   * mutate them (none do: presentation and patching copy). Each read keeps the org's position read
   * in the same statement, so a cached pair is as exact as a fresh one.
   */
  async get(key: ItemKey): Promise<StoredItem | undefined> {
    return this.readAt(key).value;
  }

  /** Answered at once (SQLite reads synchronously): a GET of a cached item waits for no promise. */
  getAt(key: ItemKey): AtPosition<StoredItem | undefined> {
    return this.readAt(key);
  }

  private readAt(key: ItemKey): AtPosition<StoredItem | undefined> {
    this.checkVersion();
    const id = itemKeyString(key);
    const hit = this.cache.get(id);
    if (hit !== undefined) return hit;
    const row = this.stmt(this.reader, GET_ITEM_AT).get(key.org, key.org, key.kind, key.gvc, key.name) as ResourceRow & { keel_seq: number | null };
    const read = { value: row.id === null ? undefined : fromRow(row), seq: row.keel_seq ?? 0 };
    if (this.cache.size >= CACHE_ENTRIES) this.cache.clear();
    this.cache.set(id, read);
    return read;
  }

  /**
   * Drops the cached reads when another connection committed. Asked once per turn of the event loop
   * (each question starts a read transaction, which takes file locks) and again after each of this
   * process's commits.
   */
  private checkVersion(): void {
    if (this.versionChecked) return;
    const version = this.stmt(this.reader, 'PRAGMA data_version').pluck().get() as number;
    if (version !== this.cachedAt) {
      this.cache.clear();
      this.cachedAt = version;
    }
    this.versionChecked = true;
    setImmediate(() => (this.versionChecked = false));
  }

  async list(request: ListRequest): Promise<StoredItem[]> {
    return (await this.listRows(request, false)).map(fromRow);
  }

  async listAt(request: ListRequest): Promise<AtPosition<StoredItem[]>> {
    const rows = await this.listRows(request, true);
    return { value: itemsOf(rows), seq: (rows[0].keel_seq as number | null) ?? 0 };
  }

  /** A list's rows; `positioned`: as positionedList() has them, with the org's position read by the same statement. */
  private async listRows(request: ListRequest, positioned: boolean): Promise<Array<ResourceRow & Record<string, unknown>>> {
    const params = new SqlParams('sqlite');
    // Placeholders are numbered in text order: the position's comes first.
    if (positioned) params.add(request.org);
    const scope = [`r.org = ${params.add(request.org)}`, `r.kind = ${params.add(request.kind)}`];
    if (request.gvc !== undefined) scope.push(`r.gvc = ${params.add(request.gvc)}`);
    const { where, orderBy } = request.build(params);
    // The budget check comes after the scope (which the index answers) and before the terms, so it runs once per candidate row.
    const budgeted = request.budgetMs === undefined ? '' : ' AND keel_within_budget()';
    const list = `SELECT ${RESOURCE_COLUMNS} FROM resources r WHERE ${scope.join(' AND ')}${budgeted} AND (${where}) ORDER BY ${orderBy} LIMIT ${params.add(request.limit)}`;
    const sql = positioned ? positionedList(POSITION, list, orderBy) : list;
    type Row = ResourceRow & Record<string, unknown>;
    if (request.budgetMs === undefined) return this.stmt(this.reader, sql).all(...params.values) as Row[];
    if (this.lists) return (await this.lists.all(sql, params.values, request.budgetMs)) as Row[];
    const statement = this.stmt(this.reader, sql);
    this.deadline = 0;
    this.budgetMs = request.budgetMs;
    try {
      return statement.all(...params.values) as Row[];
    } catch (err) {
      if (err instanceof BudgetSpent) throw overBudget(request.budgetMs);
      throw err;
    }
  }

  async findKey(keyName: string): Promise<KeyRecord | undefined> {
    const row = this.stmt(this.reader, 'SELECT key_name, org, service_account, secret_hash, created FROM service_account_keys WHERE key_name = ?').get(keyName) as
      | { key_name: string; org: string; service_account: string; secret_hash: string; created: string }
      | undefined;
    return row && { keyName: row.key_name, org: row.org, serviceAccount: row.service_account, secretHash: row.secret_hash, created: row.created };
  }

  async findSignIn(what: string, key: string): Promise<string | undefined> {
    return this.stmt(this.reader, 'SELECT data FROM signin_records WHERE what = ? AND key = ? AND (expires = 0 OR expires > ?)').pluck().get(what, key, Date.now()) as string | undefined;
  }

  async putReplicaToken(r: ReplicaTokenRecord): Promise<void> {
    this.stmt(this.writer, 'INSERT INTO replica_tokens VALUES (?, ?, ?, ?, ?, ?, ?)').run(r.tokenHash, r.org, r.gvc, r.identity, r.scope, r.replica, r.created);
  }

  async findReplicaToken(tokenHash: string): Promise<ReplicaTokenRecord | undefined> {
    const row = this.stmt(this.reader, 'SELECT token_hash, org, gvc, identity, scope, replica, created FROM replica_tokens WHERE token_hash = ?').get(tokenHash) as
      | Record<string, string>
      | undefined;
    return row && replicaToken(row);
  }

  async deleteReplicaTokens(scope: string, replica?: string): Promise<void> {
    if (replica === undefined) this.stmt(this.writer, 'DELETE FROM replica_tokens WHERE scope = ?').run(scope);
    else this.stmt(this.writer, 'DELETE FROM replica_tokens WHERE scope = ? AND replica = ?').run(scope, replica);
  }

  async orgs(): Promise<string[]> {
    return (this.stmt(this.reader, "SELECT name FROM resources WHERE kind = 'org' ORDER BY name").all() as Array<{ name: string }>).map((r) => r.name);
  }

  async orgsNaming(link: string): Promise<string[]> {
    const rows = this.stmt(this.reader, "SELECT DISTINCT org FROM resources WHERE kind IN ('group', 'policy') AND instr(data, ?) > 0").all(JSON.stringify(link)) as Array<{ org: string }>;
    return rows.map((r) => r.org);
  }

  async audit(filter: AuditFilter): Promise<AuditRecord[]> {
    const no = this.orgNumber(filter.org);
    if (no === undefined) return [];
    await this.lookupsThroughLast(filter.org);
    const { sql, values } = auditQuery(auditLayout(no * ORG_SPAN), filter);
    // Off the request thread where there is a file to open (see lists.ts): a page of events with their bodies is long work.
    const rows = this.pages ? await this.pages.all<AuditRow>(sql, values) : (this.stmt(this.reader, sql).all(...values) as AuditRow[]);
    return rows.map(fromAuditRow);
  }

  /**
   * Catches up unless the org's lookups already hold its last committed event: a read while no one
   * writes costs no round trip to the housekeeping thread. The first read after opening always
   * catches up, which also rebuilds lookups made from other events (see lookup.ts).
   */
  private async lookupsThroughLast(org: string): Promise<void> {
    if (this.caughtUpSinceOpen) {
      const through = this.stmt(this.reader, 'SELECT h.last_seq = t.seq FROM audit_heads h JOIN lookup.lookup_through t ON t.org = h.org WHERE h.org = ?').pluck().get(org);
      if (through === 1) return;
    }
    await this.catchUpAudit();
    this.caughtUpSinceOpen = true;
  }

  /** The org's number (see ChainHead.no), once it has one. */
  private orgNumber(org: string): number | undefined {
    let no = this.orgNumbers.get(org);
    if (no === undefined) {
      no = this.stmt(this.reader, 'SELECT org_no FROM audit_heads WHERE org = ?').pluck().get(org) as number | undefined;
      if (no !== undefined) this.orgNumbers.set(org, no);
    }
    return no;
  }

  /**
   * The org's sealed head, which every event committed before the call is behind; or, when an
   * event is missing so that the seals stop short of those, the last seq given out (and no hash).
   */
  async auditHead(org: string) {
    const read = () =>
      this.stmt(this.reader, 'SELECT last_seq, sealed_seq, last_hash FROM audit_heads WHERE org = ?').get(org) as { last_seq: number; sealed_seq: number; last_hash: string } | undefined;
    let head = read();
    const committed = head?.last_seq ?? 0;
    if (head && head.sealed_seq < committed) {
      await this.catchUpAudit();
      head = read()!;
      if (head.sealed_seq < committed) head = { ...head, sealed_seq: committed, last_hash: '' };
    }
    const pruned = this.stmt(this.reader, 'SELECT up_to_seq, hash FROM audit_prunes WHERE org = ?').get(org) as { up_to_seq: number; hash: string } | undefined;
    return { seq: head?.sealed_seq ?? 0, hash: head?.last_hash ?? '', prunedUpTo: pruned?.up_to_seq ?? 0, prunedHash: pruned?.hash ?? '' };
  }

  async auditPosition(org: string): Promise<number> {
    return (this.stmt(this.reader, 'SELECT last_seq FROM audit_heads WHERE org = ?').pluck().get(org) as number | undefined) ?? 0;
  }

  async auditOrgs(): Promise<string[]> {
    return (this.stmt(this.reader, 'SELECT org FROM audit_heads ORDER BY org').all() as Array<{ org: string }>).map((r) => r.org);
  }

  async pruneAudit(org: string, options: { before?: string; keep?: number }): Promise<number> {
    const no = this.orgNumber(org);
    if (no === undefined) return 0;
    const base = no * ORG_SPAN;
    // Only sealed events are pruned, and a time is found through the lookups.
    await this.catchUpAudit();
    let oldSeq = 0;
    if (options.before !== undefined) {
      const old = this.stmt(this.reader, "SELECT MAX(pos) FROM lookup.audit_lookup WHERE org = ? AND key >= 't:' AND key < ?").pluck().get(org, `t:${options.before}`) as number | null;
      oldSeq = old === null ? 0 : old - base;
    }
    return this.transaction(async () => {
      const head = this.stmt(this.writer, 'SELECT last_seq, sealed_seq, COALESCE(p.up_to_seq, 0) AS pruned FROM audit_heads h LEFT JOIN audit_prunes p ON p.org = h.org WHERE h.org = ?').get(org) as {
        last_seq: number;
        sealed_seq: number;
        pruned: number;
      };
      const cutoff = Math.min(head.sealed_seq, options.keep === undefined ? oldSeq : Math.max(oldSeq, head.last_seq - options.keep));
      if (cutoff <= head.pruned) return 0;
      const anchor = this.stmt(this.writer, `SELECT ${sealHashAt('at.pos')} FROM (SELECT ? AS pos) at`).pluck().get(base + cutoff) as string | null;
      if (anchor === null) return 0;
      const removed = this.stmt(this.writer, 'DELETE FROM audit_events WHERE pos > ? AND pos <= ?').run(base, base + cutoff).changes;
      // Seals of removed events only: a seal that also covers events kept stays.
      this.stmt(this.writer, 'DELETE FROM audit_seals WHERE pos_to > ? AND pos_to <= ?').run(base, base + cutoff);
      this.stmt(this.writer, 'INSERT INTO audit_prunes VALUES (?, ?, ?) ON CONFLICT (org) DO UPDATE SET up_to_seq = excluded.up_to_seq, hash = excluded.hash').run(org, cutoff, anchor);
      return removed;
    });
  }

  async logs(filter: LogFilter): Promise<LogLine[]> {
    const { sql, values } = logsQuery('sqlite', filter);
    return (this.stmt(this.reader, sql).all(...values) as LogRow[]).map(fromLogRow);
  }

  async logLabelValues(org: string, label: LogLabel, from: string, to: string, limit: number): Promise<string[]> {
    const { sql, values } = labelValuesQuery('sqlite', org, label, from, to, limit);
    return this.stmt(this.reader, sql).pluck().all(...values) as string[];
  }

  async pruneLogs(org: string, before: string, max: number): Promise<number> {
    const { sql, values } = pruneLogsQuery('sqlite', org, before, max);
    return this.transaction(async () => {
      const gone = this.stmt(this.writer, sql).pluck().all(...values) as number[];
      this.noteLogBytes(org, -gone.reduce((a, b) => a + b, 0));
      return gone.length;
    });
  }

  async logUsage(): Promise<Array<{ org: string; bytes: number; rows: number }>> {
    return (this.stmt(this.reader, LOG_USAGE).all() as Array<{ org: string; bytes: number; n: number }>).map((r) => ({ org: r.org, bytes: Number(r.bytes), rows: Number(r.n) }));
  }

  async trimLogs(org: string, bytes: number, max: number): Promise<{ lines: number; bytes: number }> {
    const { sql, values } = oldestLogsQuery('sqlite', org, max);
    return this.transaction(async () => {
      const rows = this.stmt(this.writer, sql).all(...values) as Array<{ id: number; bytes: number }>;
      const n = enoughOf(rows, bytes);
      if (n === 0) return { lines: 0, bytes: 0 };
      const ids = rows.slice(0, n).map((r) => r.id);
      const remove = this.stmt(this.writer, 'DELETE FROM log_lines WHERE id = ?');
      for (const id of ids) remove.run(id);
      const removed = rows.slice(0, n).reduce((a, r) => a + Number(r.bytes), 0);
      this.noteLogBytes(org, -removed);
      return { lines: n, bytes: removed };
    });
  }

  async foldLogUsage(org: string): Promise<void> {
    await this.transaction(async () => {
      const bytes = this.stmt(this.writer, 'DELETE FROM log_lines_usage WHERE org = ? RETURNING bytes').pluck().all(org) as number[];
      this.noteLogBytes(org, bytes.reduce((a, b) => a + Number(b), 0));
    });
  }

  /** Records a change of an org's bytes of lines, in the transaction under way. */
  private noteLogBytes(org: string, bytes: number): void {
    if (bytes !== 0) this.stmt(this.writer, 'INSERT INTO log_lines_usage (org, bytes) VALUES (?, ?)').run(org, bytes);
  }

  async ping(): Promise<void> {
    this.stmt(this.reader, 'SELECT 1').get();
  }

  async isEmpty(): Promise<boolean> {
    return !this.stmt(this.reader, "SELECT 1 FROM resources WHERE kind = 'org' LIMIT 1").get();
  }

  /**
   * Group commit: transactions that queue up while one batch runs are run together in the next
   * batch, each inside its own savepoint (so each is still all-or-nothing and sees the ones before
   * it, as if run one after another), and the batch commits once. Each caller is answered only
   * after that commit.
   */
  transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ fn, resolve: resolve as (value: unknown) => void, reject });
      // Started after this turn of the event loop, so every request read in the same turn joins the batch.
      if (this.queue.length === 1) setImmediate(() => void this.mutex.run(() => this.drain()));
    });
  }

  private async drain(): Promise<void> {
    while (this.queue.length > 0) {
      const turn = this.housekeeper?.writerTurn(RESTART_TURN_MS);
      if (turn) await turn;
      let began: boolean;
      try {
        began = this.begin();
      } catch (error) {
        this.queue.splice(0, MAX_BATCH).forEach((job) => job.reject(error));
        continue;
      }
      if (!began) {
        await new Promise((resolve) => setTimeout(resolve, BUSY_RETRY_MS));
        continue;
      }
      const batch = this.queue.splice(0, MAX_BATCH);
      let outcomes: Array<{ ok: true; value: unknown } | { ok: false; error: unknown }>;
      try {
        outcomes = await this.runBatch(batch);
      } catch (error) {
        // The batch as a whole failed (BEGIN or COMMIT refused, e.g. the disk is full): none of it happened.
        if (this.writer.inTransaction) this.stmt(this.writer, 'ROLLBACK').run();
        batch.forEach((job) => job.reject(error));
        continue;
      }
      batch.forEach((job, i) => {
        const outcome = outcomes[i];
        if (outcome.ok) job.resolve(outcome.value);
        else job.reject(outcome.error);
      });
    }
  }

  /** An event has its seq once appended; reads seal what came before them first (seals.ts). */
  async chained(): Promise<void> {}

  /** Takes the write lock; false when another connection holds it. */
  private begin(): boolean {
    try {
      this.stmt(this.writer, 'BEGIN IMMEDIATE').run();
      return true;
    } catch (error) {
      if ((error as { code?: string }).code === 'SQLITE_BUSY') return false;
      throw error;
    }
  }

  /** Runs each job in its own savepoint inside the transaction begin() opened, and commits. */
  private async runBatch(batch: typeof this.queue) {
    const outcomes: Array<{ ok: true; value: unknown } | { ok: false; error: unknown }> = [];
    this.chainHeads.clear();
    this.appendedRows = [];
    for (const job of batch) {
      this.stmt(this.writer, 'SAVEPOINT keel_tx').run();
      const heads = new Map(this.chainHeads);
      // clearAll() starts new ones rather than emptying these, so a rollback can go back to them.
      const appended = this.appendedRows;
      const appendedBefore = appended.length;
      try {
        const value = await job.fn(this.tx);
        this.stmt(this.writer, 'RELEASE keel_tx').run();
        outcomes.push({ ok: true, value });
      } catch (error) {
        this.stmt(this.writer, 'ROLLBACK TO keel_tx').run();
        this.stmt(this.writer, 'RELEASE keel_tx').run();
        this.chainHeads = heads;
        this.appendedRows = appended;
        appended.length = appendedBefore;
        outcomes.push({ ok: false, error });
      }
    }
    this.writeAppended();
    this.stmt(this.writer, 'COMMIT').run();
    // This commit changed what reads see: drop them here, since data_version moves only for other
    // connections' commits (and an in-memory database reads through its writer); then look again
    // for those.
    this.cache.clear();
    this.versionChecked = false;
    return outcomes;
  }

  /** An org's chain head as the batch under way leaves it so far; an org's first event gives it its number. */
  private headOf(org: string): ChainHead {
    const pending = this.chainHeads.get(org);
    if (pending) return pending;
    const stored = (this.stmt(this.writer, 'SELECT last_seq, org_no FROM audit_heads WHERE org = ?').get(org) ??
      this.stmt(
        this.writer,
        "INSERT INTO audit_heads (org, last_seq, last_hash, org_no) VALUES (?, 0, '', (SELECT COALESCE(MAX(org_no), 0) + 1 FROM audit_heads)) RETURNING last_seq, org_no",
      ).get(org)) as { last_seq: number; org_no: number };
    return { seq: stored.last_seq, no: stored.org_no };
  }

  private readonly tx: Tx = {
    get: async (key) => this.getOn(this.writer, key),
    insert: async (item) => {
      try {
        this.stmt(this.writer, 'INSERT INTO resources (org, kind, gvc, name, id, version, created, last_modified, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)').run(
          item.org,
          item.kind,
          item.gvc,
          item.name,
          item.id,
          item.version,
          item.created,
          item.lastModified,
          JSON.stringify(item.data),
        );
      } catch (err) {
        if ((err as { code?: string }).code?.startsWith('SQLITE_CONSTRAINT')) throw alreadyExists(item);
        throw err;
      }
      this.writeTags(item);
    },
    update: async (item, expectedVersion, options) => {
      const result = this.stmt(
        this.writer,
        'UPDATE resources SET version = ?, last_modified = ?, data = ? WHERE org = ? AND kind = ? AND gvc = ? AND name = ? AND version = ?',
      ).run(item.version, item.lastModified, JSON.stringify(item.data), item.org, item.kind, item.gvc, item.name, expectedVersion);
      if (result.changes === 0) throw staleVersion(item);
      if (!options?.tagsUnchanged) this.writeTags(item);
    },
    writeStatus: async (key, data) => {
      this.stmt(this.writer, 'UPDATE resources SET data = ? WHERE org = ? AND kind = ? AND gvc = ? AND name = ?').run(
        JSON.stringify(data),
        key.org,
        key.kind,
        key.gvc,
        key.name,
      );
    },
    delete: async (key) => {
      const row = this.getOn(this.writer, key);
      if (!row) return;
      this.stmt(this.writer, 'DELETE FROM resource_tags WHERE id = ?').run(row.id);
      this.stmt(this.writer, 'DELETE FROM resources WHERE id = ?').run(row.id);
    },
    tryLock: async () => true,
    clearAll: async () => {
      const tables = this.stmt(this.writer, "SELECT name FROM main.sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name <> 'keel_migrations'").pluck().all() as string[];
      for (const table of tables) this.writer.prepare(`DELETE FROM main."${table}"`).run();
      // Events and heads of the batch's earlier transactions went with everything else.
      this.chainHeads = new Map();
      this.appendedRows = [];
      this.orgNumbers.clear();
    },
    countInGvc: async (org, kind, gvc) =>
      (this.stmt(this.writer, 'SELECT COUNT(*) AS n FROM resources WHERE org = ? AND kind = ? AND gvc = ?').get(org, kind, gvc) as { n: number }).n,
    putKey: async (k) => {
      this.stmt(this.writer, 'INSERT INTO service_account_keys VALUES (?, ?, ?, ?, ?)').run(k.keyName, k.org, k.serviceAccount, k.secretHash, k.created);
    },
    deleteKeys: async (org, serviceAccount, keep) => {
      const existing = this.stmt(this.writer, 'SELECT key_name FROM service_account_keys WHERE org = ? AND service_account = ?').all(org, serviceAccount) as Array<{
        key_name: string;
      }>;
      for (const { key_name } of existing) {
        if (!keep.includes(key_name)) this.stmt(this.writer, 'DELETE FROM service_account_keys WHERE key_name = ?').run(key_name);
      }
    },
    putSignIn: async (what, key, data, expires, keep) => {
      this.stmt(this.writer, 'DELETE FROM signin_records WHERE what = ? AND expires <> 0 AND expires <= ?').run(what, Date.now());
      this.stmt(this.writer, `INSERT OR ${keep ? 'IGNORE' : 'REPLACE'} INTO signin_records (what, key, data, expires) VALUES (?, ?, ?, ?)`).run(what, key, data, expires);
    },
    takeSignIn: async (what, key) => {
      const row = this.stmt(this.writer, 'DELETE FROM signin_records WHERE what = ? AND key = ? RETURNING data, expires').get(what, key) as { data: string; expires: number } | undefined;
      return row && (row.expires === 0 || row.expires > Date.now()) ? row.data : undefined;
    },
    appendAudit: async (event) => this.append(event),
    appendLogs: async (lines) => {
      const insert = this.stmt(this.writer, INSERT_LOG);
      for (const line of lines) insert.run(logValues(line));
      for (const [org, bytes] of usageOf(lines)) this.noteLogBytes(org, bytes);
    },
  };

  /** Gives an event its place after its org's head as the batch under way leaves it (written by writeAppended). */
  private append(event: NewAuditEvent): void {
    const head = this.headOf(event.org);
    const seq = head.seq + 1;
    this.chainHeads.set(event.org, { seq, no: head.no });
    this.appendedRows.push(head.no * ORG_SPAN + seq, event.context, event.body);
    event.seq = seq;
  }

  /** Writes the events appended so far and moves their orgs' heads, in the transaction under way. */
  private writeAppended(): void {
    this.insertAppended();
    const moveHead = this.stmt(this.writer, 'UPDATE audit_heads SET last_seq = ? WHERE org = ?');
    for (const [org, head] of this.chainHeads) moveHead.run(head.seq, org);
    this.chainHeads.clear();
  }

  private insertAppended(): void {
    const values = this.appendedRows;
    for (let at = 0; at < values.length; at += AUDIT_VALUES * EVENTS_PER_INSERT) {
      const events = Math.min(EVENTS_PER_INSERT, (values.length - at) / AUDIT_VALUES);
      this.stmt(this.writer, INSERT_EVENTS[events - 1]).run(values.slice(at, at + events * AUDIT_VALUES));
    }
    this.appendedRows = [];
  }

  private writeTags(item: StoredItem): void {
    this.stmt(this.writer, 'DELETE FROM resource_tags WHERE id = ?').run(item.id);
    const insert = this.stmt(this.writer, 'INSERT INTO resource_tags (id, org, kind, gvc, name, key, value) VALUES (?, ?, ?, ?, ?, ?, ?)');
    for (const [k, v] of tagRows(item)) insert.run(item.id, item.org, item.kind, item.gvc, item.name, k, v);
  }

  async close(): Promise<void> {
    clearInterval(this.optimizer);
    clearInterval(this.lookupKeeper);
    await this.housekeeper?.stop();
    await this.lists?.close();
    await this.pages?.close();
    await this.mutex.run(async () => {
      if (this.reader !== this.writer) this.reader.close();
      this.writer.close();
    });
  }
}
