import type { AuditFilter, ItemKey, ListRequest, LogFilter, LogLabel, NewAuditEvent, ReplicaTokenRecord, Store, Tx } from './types.js';

/**
 * A store whose transactions are all one transaction already open: code written against Store
 * (the resource service, createOrg) then makes several changes that commit, or roll back, together.
 * Reads of items go through the transaction, so each change sees the ones before it. Changes are
 * announced (chained) only once `committed` resolves.
 */
export class InTransaction implements Store {
  readonly dialect: Store['dialect'];
  readonly snapshots: Store['snapshots'];

  constructor(
    private readonly base: Store,
    private readonly tx: Tx,
    private readonly committed: Promise<void>,
  ) {
    this.dialect = base.dialect;
    this.snapshots = base.snapshots;
  }

  get(key: ItemKey) {
    return this.tx.get(key);
  }
  /** Inside a transaction no position is exact (its changes have none yet): the committed head's goes with the item. */
  async getAt(key: ItemKey) {
    return { value: await this.tx.get(key), seq: await this.base.auditPosition(key.org) };
  }
  transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
    return fn(this.tx);
  }
  async chained(events: readonly NewAuditEvent[]): Promise<void> {
    await this.committed;
    await this.base.chained(events);
  }
  list(request: ListRequest) {
    return this.base.list(request);
  }
  listAt(request: ListRequest) {
    return this.base.listAt(request);
  }
  findKey(keyName: string) {
    return this.base.findKey(keyName);
  }
  findSignIn(what: string, key: string) {
    return this.base.findSignIn(what, key);
  }
  putReplicaToken(record: ReplicaTokenRecord) {
    return this.base.putReplicaToken(record);
  }
  findReplicaToken(tokenHash: string) {
    return this.base.findReplicaToken(tokenHash);
  }
  deleteReplicaTokens(scope: string, replica?: string) {
    return this.base.deleteReplicaTokens(scope, replica);
  }
  orgs() {
    return this.base.orgs();
  }
  orgsNaming(link: string) {
    return this.base.orgsNaming(link);
  }
  audit(filter: AuditFilter) {
    return this.base.audit(filter);
  }
  auditHead(org: string) {
    return this.base.auditHead(org);
  }
  auditPosition(org: string) {
    return this.base.auditPosition(org);
  }
  logs(filter: LogFilter) {
    return this.base.logs(filter);
  }
  logLabelValues(org: string, label: LogLabel, from: string, to: string, limit: number) {
    return this.base.logLabelValues(org, label, from, to, limit);
  }
  pruneLogs(org: string, before: string, max: number) {
    return this.base.pruneLogs(org, before, max);
  }
  logUsage() {
    return this.base.logUsage();
  }
  trimLogs(org: string, bytes: number, max: number) {
    return this.base.trimLogs(org, bytes, max);
  }
  foldLogUsage(org: string) {
    return this.base.foldLogUsage(org);
  }
  pruneAudit(org: string, options: { before?: string; keep?: number }) {
    return this.base.pruneAudit(org, options);
  }
  auditOrgs() {
    return this.base.auditOrgs();
  }
  replaced() {
    return this.base.replaced();
  }
  ping() {
    return this.base.ping();
  }
  isEmpty() {
    return this.base.isEmpty();
  }
  close() {
    return Promise.resolve();
  }
}

/**
 * Runs `fn` with a store whose every transaction is this one transaction (see InTransaction).
 * `fn` may run more than once (a store may retry a transaction), and must start over each time.
 */
export async function inOneTransaction<T>(store: Store, fn: (inner: Store) => Promise<T>): Promise<T> {
  let commit!: () => void;
  const committed = new Promise<void>((resolve) => (commit = resolve));
  const result = await store.transaction((tx) => fn(new InTransaction(store, tx, committed)));
  commit();
  return result;
}
