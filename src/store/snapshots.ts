// Snapshots: a consistent copy of a whole Keel instance (every org, item, key and audit event),
// taken while it serves and restored atomically, and the notice that the stored state was
// replaced (by a restore or a reset) so that whatever a process remembers of it is dropped.
//
// A restore rewinds what the orgs hold, never what happened to them: the audit chains (and the log
// lines, also a record of what ran) are not rewound but appended to, and a key revoked since the
// snapshot stays revoked. Only a reset, which starts the instance again from nothing, replaces
// everything (replaceAll).
import { EventEmitter } from 'node:events';
import { ApiError } from '../errors.js';
import type { NewAuditEvent, Store } from './types.js';

export interface SnapshotInfo {
  name: string;
  /** When it was taken (ISO). */
  created: string;
  /** Its size in bytes, where the store can tell. */
  size?: number;
}

export interface Snapshots {
  /** Takes a snapshot; already_exists when the name is taken. */
  save(name: string): Promise<SnapshotInfo>;
  /**
   * Rewinds the orgs' items and keys to the snapshot's, in one transaction that also appends the
   * events `record` makes for the orgs whose state that changes; not_found when there is none.
   * Tables that keep a record (see isRewound) stay as they are; keys gone since the snapshot stay gone.
   */
  restore(name: string, record: (restored: RestoredOrg[]) => NewAuditEvent[]): Promise<RestoredOrg[]>;
  /** Replaces the whole stored state, audit chains included, with the snapshot's (a reset's own baseline). */
  replaceAll(name: string): Promise<void>;
  list(): Promise<SnapshotInfo[]>;
  /** not_found when there is none. */
  delete(name: string): Promise<void>;
}

/**
 * Emits 'replaced' (store) once a store's contents were replaced, in this process or (PostgreSQL)
 * another one: caches of it (authentication, authorization), reconciler and watch positions must
 * start again from what is stored now.
 */
export const replacements = new EventEmitter().setMaxListeners(0);

/** Calls `listener` whenever `store`'s contents were replaced; returns the function that stops it. */
export function onReplaced(store: Store, listener: () => void): () => void {
  const filtered = (replaced: Store) => replaced === store && listener();
  replacements.on('replaced', filtered);
  return () => void replacements.off('replaced', filtered);
}

/** An org whose state a restore changed, and the position of its chain that the restored state reflects. */
export interface RestoredOrg {
  org: string;
  position: number;
  /** The snapshot was taken in a chain a reset has since replaced: `position` is not one of the current chain's. */
  earlierChain?: boolean;
}

/**
 * Whether a restore rewinds a table: not the audit chains' nor the log lines, which record what
 * happened, nor the tokens of replicas running now (a restore must neither revive nor drop them).
 */
export function isRewound(table: string): boolean {
  return !table.startsWith('audit_') && !table.startsWith('log_lines') && !table.startsWith('keel_') && table !== 'replica_tokens';
}

/** A service account's stored body without the keys that no longer exist (revoked after the snapshot). */
export function withLiveKeys(data: Record<string, unknown>, live: ReadonlySet<string>): Record<string, unknown> | undefined {
  if (!Array.isArray(data.keys)) return undefined;
  const keys = (data.keys as Array<{ name?: unknown }>).filter((k) => typeof k.name === 'string' && live.has(k.name));
  return keys.length === data.keys.length ? undefined : { ...data, keys };
}

const NAME = /^[a-z0-9]([-a-z0-9_.]{0,62}[a-z0-9])?$/;
/** Keel's own snapshots (a reset's baseline): never listed, never named by a client. */
const INTERNAL = /^\.keel-[a-z0-9-]{1,58}$/;
export const INTERNAL_PREFIX = '.keel-';

/** Snapshot names are plain file names: lowercase letters, digits, '-', '_' and '.', no '..' (never a path). */
export function checkSnapshotName(name: unknown): string {
  if (typeof name !== 'string' || !NAME.test(name) || name.includes('..')) {
    throw ApiError.badRequest(`'${String(name)}' is not a valid snapshot name (1 to 64 of a-z, 0-9, '-', '_', '.'; starting and ending with a letter or digit)`, [
      { path: 'name', message: 'is not a valid snapshot name' },
    ]);
  }
  return name;
}

/** What a store accepts as a name: a client's (checked by checkSnapshotName at the API and command) or Keel's own. */
export function storableSnapshotName(name: string): string {
  return INTERNAL.test(name) ? name : checkSnapshotName(name);
}

export function snapshotNotFound(name: string): ApiError {
  return ApiError.notFound(`snapshot '${name}' not found`);
}

export function snapshotExists(name: string): ApiError {
  return new ApiError('already_exists', `snapshot '${name}' already exists`);
}
