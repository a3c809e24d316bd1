// What Keel keeps on disk holds secrets (the database, snapshots, registry content, admin.token),
// so it is Keel's alone: the data directory 0700, every file Keel writes 0600 and every directory
// 0700. The process's umask makes that so for whatever Keel creates; tightenDataDir fixes what an
// older Keel left readable. The runtime's directory is left as it is below its top: root
// filesystems, volumes and secrets mounted into replicas keep the modes their non-root users
// need, set where they are made (see runtime/), and the data directory's own 0700 already keeps
// other local users from reaching them.
import { chmodSync, lstatSync, mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

/** Files and directories created from now on are the owner's only. */
export function keepPrivate(): void {
  process.umask(0o077);
}

/** The data directory's subdirectory that the runtime manages (see docs/runtime.md). */
const RUNTIME = 'runtime';

/**
 * Makes the data directory 0700 and takes group and other permissions off everything in it, once
 * at start (one lstat per entry; a chmod only where one is needed). Symbolic links are not followed.
 */
export function tightenDataDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  tighten(dir, true);
}

function tighten(path: string, top: boolean): void {
  const stat = lstatSync(path, { throwIfNoEntry: false });
  if (!stat || stat.isSymbolicLink()) return;
  if ((stat.mode & 0o077) !== 0) chmodSync(path, stat.mode & 0o7700);
  if (!stat.isDirectory()) return;
  for (const name of readdirSync(path)) {
    const entry = join(path, name);
    // The runtime's directory itself is Keel's; what is under it keeps the modes the runtime gave it.
    if (top && name === RUNTIME) tightenOne(entry);
    else tighten(entry, false);
  }
}

function tightenOne(path: string): void {
  const stat = lstatSync(path, { throwIfNoEntry: false });
  if (stat && !stat.isSymbolicLink() && (stat.mode & 0o077) !== 0) chmodSync(path, stat.mode & 0o7700);
}
