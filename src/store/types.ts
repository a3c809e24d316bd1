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
  /** Builds the extra WHERE fragment (query terms, view filter) and ORDER BY over `resources r`. */
  build(params: SqlParams): { where: string; orderBy: string };
  limit: number;
}

export interface KeyRecord {
  keyName: string;
  org: string;
  serviceAccount: string;
  secretHash: string;
  created: string;
}

/** Operations inside one transaction. Reads made here see the transaction's own writes. */
export interface Tx {
  /** Reads an item; `lock` holds it against concurrent writers until the transaction ends. */
  get(key: ItemKey, lock?: 'share' | 'update'): Promise<StoredItem | undefined>;
  /** Inserts a new item; throws ApiError already_exists when the key is taken. */
  insert(item: StoredItem): Promise<void>;
  /** Writes a new state of an item whose stored version is `expectedVersion`; throws ApiError conflict otherwise. */
  update(item: StoredItem, expectedVersion: number): Promise<void>;
  /** Replaces an item's body without changing version or lastModified (status written by Keel itself). */
  writeStatus(key: ItemKey, data: Record<string, unknown>): Promise<void>;
  delete(key: ItemKey): Promise<void>;
  countInGvc(org: string, kind: string, gvc: string): Promise<number>;
  putKey(record: KeyRecord): Promise<void>;
  deleteKeys(org: string, serviceAccount: string, keep: string[]): Promise<void>;
}

export interface Store {
  readonly dialect: Dialect;
  get(key: ItemKey): Promise<StoredItem | undefined>;
  list(request: ListRequest): Promise<StoredItem[]>;
  findKey(keyName: string): Promise<KeyRecord | undefined>;
  /** Orgs whose groups or policies mention a principal link (the candidates for GET /org). */
  orgsNaming(link: string): Promise<string[]>;
  /** Runs `fn` in one transaction: all of its writes happen, or none. */
  transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
  /** True once the store holds at least one org (decides first-start bootstrap). */
  isEmpty(): Promise<boolean>;
  close(): Promise<void>;
}
