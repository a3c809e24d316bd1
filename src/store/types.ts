import type { Snapshots } from './snapshots.js';
import type { Dialect, SqlParams } from './sql.js';

/** Addresses one stored item. `gvc` is '' for org-scoped kinds. */
export interface ItemKey {
  org: string;
  kind: string;
  gvc: string;
  name: string;
}

/** A stored item: its key, its bookkeeping columns and the resource body (without links). */
export interface StoredItem extends ItemKey {
  id: string;
  version: number;
  created: string;
  lastModified: string;
  data: Record<string, unknown>;
}

export interface ListRequest {
  org: string;
  kind: string;
  /** A GVC's name, '' for org-scoped kinds, or undefined for every GVC of the org. */
  gvc?: string;
  /**
   * Builds the extra WHERE fragment (query terms, view filter) and ORDER BY over `resources r`, and
   * on PostgreSQL perhaps a join that drives the scan (see CompileOptions.drive).
   */
  build(params: SqlParams): { where: string; orderBy: string; join?: string };
  limit: number;
  /**
   * The same list decided in memory: from every item of the scope (org, kind, gvc) at one position,
   * the items build()'s statement would return, in its order, at most `limit`. A store holding the
   * scope may answer with it instead of running the statement (the PostgreSQL read cache); it passes
   * the same array while the scope is unchanged, so what is derived from it can be kept.
   */
  memory?: (items: readonly StoredItem[], limit: number) => StoredItem[];
  /** Stop the statement once it has run this long and throw overBudget() (a caller's query must not hold the database or, on SQLite, the event loop). */
  budgetMs?: number;
}

/**
 * A read and the org's chain position it reflects, read in the same snapshot: the read shows exactly
 * the changes whose audit events have seq <= `seq`, so a watch from `seq` delivers each later change
 * once and none that the read already showed.
 */
export interface AtPosition<T> {
  value: T;
  seq: number;
}

export interface KeyRecord {
  keyName: string;
  org: string;
  serviceAccount: string;
  secretHash: string;
  created: string;
}

/** A running replica's CPLN_TOKEN, as stored: only its hash, and whose identity it acts as. */
export interface ReplicaTokenRecord {
  tokenHash: string;
  org: string;
  gvc: string;
  identity: string;
  /** The data directory's runtime (scopeOf in runc.ts) and the replica there that holds it. */
  scope: string;
  replica: string;
  created: string;
}

/** An audit event as the writer hands it over; the store assigns seq and hash. */
export interface NewAuditEvent {
  org: string;
  id: string;
  context: string;
  eventTime: string;
  resourceType: string;
  resourceName: string;
  resourceId: string;
  subjectName: string;
  actionType: string;
  /** The whole event as JSON text: hashed and returned byte for byte. */
  body: string;
  /**
   * Set by the store when it gives the event its place in the chain, if that place is known in
   * this process: on SQLite when the transaction resolves; on PostgreSQL once `chained` resolves,
   * when this process's sealer chained it.
   */
  seq?: number;
}

export interface AuditRecord extends NewAuditEvent {
  seq: number;
  hash: string;
}

export interface AuditFilter {
  org: string;
  /** One event by its id. */
  id?: string;
  context?: string;
  resourceType?: string;
  /** Any of these resource types. */
  resourceTypes?: readonly string[];
  resourceName?: string;
  /** Any of these resource names. */
  resourceNames?: readonly string[];
  resourceId?: string;
  subjectName?: string;
  actionType?: string;
  /** Leaves out events of this action type. */
  exceptActionType?: string;
  /** ISO times, inclusive. */
  from?: string;
  to?: string;
  afterSeq?: number;
  /** Events up to and including this seq (one read from auditHead, so PostgreSQL need not seal what is pending first). */
  throughSeq?: number;
  /** The newest events first (the limit then takes the newest). */
  newestFirst?: boolean;
  limit: number;
}

/** The labels a log line may carry (a line without one has '' there, which LogQL reads as "no such label"). */
export const LOG_LABELS = ['gvc', 'workload', 'location', 'container', 'replica', 'volumeset'] as const;
export type LogLabel = (typeof LOG_LABELS)[number];

/** A log line as written: `ts` is nanoseconds since the epoch as 19 digits. */
export interface NewLogLine {
  org: string;
  ts: string;
  labels: Partial<Record<LogLabel, string>>;
  line: string;
}

export interface LogLine extends NewLogLine {
  id: number;
  labels: Record<LogLabel, string>;
}

/** Log lines of an org in a time range, with the parts of a LogQL query that SQL can evaluate. */
export interface LogFilter {
  org: string;
  /** Inclusive and exclusive bounds, as `ts`. */
  from: string;
  to: string;
  /** Newest first. */
  backward: boolean;
  labels: ReadonlyArray<{ label: LogLabel; op: '=' | '!='; value: string }>;
  /** Substrings the line must contain (or, negated, must not). */
  contains: ReadonlyArray<{ text: string; negate: boolean }>;
  /** Continues a scan after this line (in its direction). */
  after?: { ts: string; id: number };
  limit: number;
}

/** Operations inside one transaction. Reads made here see the transaction's own writes. */
export interface Tx {
  /** Reads an item; `lock` holds it against concurrent writers until the transaction ends. */
  get(key: ItemKey, lock?: 'share' | 'update'): Promise<StoredItem | undefined>;
  /** Inserts a new item; throws ApiError already_exists when the key is taken. */
  insert(item: StoredItem): Promise<void>;
  /**
   * Writes a new state of an item whose stored version is `expectedVersion`; throws ApiError
   * conflict otherwise. `tagsUnchanged` lets the store skip rewriting the item's tag index.
   */
  update(item: StoredItem, expectedVersion: number, options?: { tagsUnchanged?: boolean }): Promise<void>;
  /** Replaces an item's body without changing version or lastModified (status written by Keel itself). */
  writeStatus(key: ItemKey, data: Record<string, unknown>): Promise<void>;
  delete(key: ItemKey): Promise<void>;
  /**
   * Takes a lock on `name` until the transaction ends, without waiting: false when another
   * transaction (another Keel process) holds it. Keel's reconcilers use it so that one runner
   * at a time works on an object. SQLite's transactions are already serialized: always true.
   */
  tryLock(name: string): Promise<boolean>;
  /** Deletes every item, key and audit event of every org (a reset starts again from nothing). */
  clearAll(): Promise<void>;
  countInGvc(org: string, kind: string, gvc: string): Promise<number>;
  putKey(record: KeyRecord): Promise<void>;
  deleteKeys(org: string, serviceAccount: string, keep: string[]): Promise<void>;
  /** Writes a sign-in record (replacing the one of that key, unless `keep`); `expires` in ms since the epoch, 0 for never. */
  putSignIn(what: string, key: string, data: string, expires: number, keep?: boolean): Promise<void>;
  /** Removes a sign-in record and returns its data, unless it is absent or expired: only one transaction takes it. */
  takeSignIn(what: string, key: string): Promise<string | undefined>;
  /**
   * Appends an event to the org's hash chain as part of this transaction: it exists exactly when
   * the transaction commits, and has its place (seq, hash) in the chain by the time the
   * transaction's promise resolves (see NewAuditEvent.seq).
   */
  appendAudit(event: NewAuditEvent): Promise<void>;
  /** Adds log lines; they exist exactly when the transaction commits. */
  appendLogs(lines: readonly NewLogLine[]): Promise<void>;
}

/**
 * How a process sharing its database with others learns of their changes before it decides
 * (PostgreSQL's read cache): a request takes a mark when it arrives and waits for a catch-up sent
 * after it, which first tells the access listeners which orgs' access-bearing items or keys changed.
 */
export interface AccessFeed {
  /** Taken when a request arrives: a catch-up sent after it serves the request's reads. */
  mark(): number;
  /**
   * True once a catch-up sent after `mark` (or after this call) has been applied; false when it
   * failed, every listener having been told that any org may have changed (read the database).
   */
  caughtUp(mark?: number): boolean | Promise<boolean>;
  /** `listener(org)`: the org's access may have changed; `listener(undefined)`: any org's. Returns the function that stops it. */
  onAccess(listener: (org: string | undefined) => void): () => void;
}

export interface Store {
  readonly dialect: Dialect;
  /** Present where other processes write the same database (see AccessFeed). */
  readonly accessFeed?: AccessFeed;
  get(key: ItemKey): Promise<StoredItem | undefined>;
  list(request: ListRequest): Promise<StoredItem[]>;
  /** get(), with the org's chain position (see AtPosition); `mark`: the caller's AccessFeed mark, when it has one; answered at once where the backend reads synchronously (SQLite). */
  getAt(key: ItemKey, mark?: number): AtPosition<StoredItem | undefined> | Promise<AtPosition<StoredItem | undefined>>;
  /** list(), with the org's chain position (see AtPosition); `mark` as for getAt. */
  listAt(request: ListRequest, mark?: number): Promise<AtPosition<StoredItem[]>>;
  findKey(keyName: string): Promise<KeyRecord | undefined>;
  /** A sign-in record's data, unless absent or expired. */
  findSignIn(what: string, key: string): Promise<string | undefined>;
  /** Replica tokens (CPLN_TOKEN): added when a replica starts, found by hash, deleted when it stops (every replica of the scope without `replica`). */
  putReplicaToken(record: ReplicaTokenRecord): Promise<void>;
  findReplicaToken(tokenHash: string): Promise<ReplicaTokenRecord | undefined>;
  deleteReplicaTokens(scope: string, replica?: string): Promise<void>;
  /** Every org's name, sorted. */
  orgs(): Promise<string[]>;
  /** Orgs whose groups or policies mention a principal link (the candidates for GET /org). */
  orgsNaming(link: string): Promise<string[]>;
  /** Events in seq order. */
  audit(filter: AuditFilter): Promise<AuditRecord[]>;
  /** The org's chain head (0 and '' before its first event) and the anchor left by pruning. */
  auditHead(org: string): Promise<{ seq: number; hash: string; prunedUpTo: number; prunedHash: string }>;
  /** The org's last seq given out, read in one cheap statement (PostgreSQL: without chaining pending events first). */
  auditPosition(org: string): Promise<number>;
  /** Removes an org's events older than `before` or beyond the newest `keep`, recording the new chain anchor. */
  pruneAudit(org: string, options: { before?: string; keep?: number }): Promise<number>;
  /** Orgs that have audit events (for retention). */
  auditOrgs(): Promise<string[]>;
  /** Log lines in the filter's order, at most `limit`. */
  logs(filter: LogFilter): Promise<LogLine[]>;
  /** The distinct values a label has on an org's lines in a time range, sorted, at most `limit`. */
  logLabelValues(org: string, label: LogLabel, from: string, to: string, limit: number): Promise<string[]>;
  /** Removes up to `max` of an org's lines older than `before` (a `ts`); returns how many. */
  pruneLogs(org: string, before: string, max: number): Promise<number>;
  /** Each org's bytes of stored lines (see lineBytes in logs-sql.ts), and how many rows of changes hold the figure. */
  logUsage(): Promise<Array<{ org: string; bytes: number; rows: number }>>;
  /** Removes an org's oldest lines until at least `bytes` of them have gone, at most `max` lines; returns the lines and bytes removed. */
  trimLogs(org: string, bytes: number, max: number): Promise<{ lines: number; bytes: number }>;
  /** Folds the org's rows of changes to its bytes into one. */
  foldLogUsage(org: string): Promise<void>;
  /** Runs `fn` in one transaction: all of its writes happen, or none. */
  transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
  /**
   * Resolves once events of this process's resolved transactions are in their orgs' chains. A
   * transaction resolves as soon as it commits, with its events durable but perhaps still pending
   * (PostgreSQL chains them in the background; SQLite as it appends them). Never rejects: events
   * whose sealing failed are chained later by the sweeper, and audit reads chain pending events first.
   */
  chained(events: readonly NewAuditEvent[]): Promise<void>;
  /** Copies of the whole stored state (store/snapshots.ts). */
  readonly snapshots: Snapshots;
  /**
   * Called after the stored state was replaced (a restore or a reset committed): drops what this
   * process remembers of it and has every Keel process on the store do the same (see onReplaced).
   */
  replaced(): Promise<void>;
  /** Resolves when the store answers a trivial query (readiness). */
  ping(): Promise<void>;
  /** True once the store holds at least one org (decides first-start bootstrap). */
  isEmpty(): Promise<boolean>;
  close(): Promise<void>;
}
