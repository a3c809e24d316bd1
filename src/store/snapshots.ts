// Snapshots: a consistent copy of a whole Keel instance (every org, item, key and audit event),
// taken while it serves and restored atomically, and the notice that the stored state was
// replaced (by a restore or a reset) so that whatever a process remembers of it is dropped.
import { EventEmitter } from 'node:events';
import { ApiError } from '../errors.js';
import type { Store } from './types.js';

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
  /** Replaces the whole stored state with the snapshot's, in one transaction; not_found when there is none. */
  restore(name: string): Promise<void>;
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
