// Filesystems of a fixed size, each a sparse file made ext4 (no journal, no reserved blocks) and
// loop-mounted, so that what a replica writes on one is bounded by its size: past it the writes
// fail with ENOSPC and the host's disk does not fill. The file takes on the host only what has
// been written to it (docs/runtime.md, "Disk").
// - A replica's own disk (KEEL_REPLICA_DISK_BYTES) in its directory: the upper layers of its
//   containers' overlays and its scratch volumes; it goes with the replica.
// - A volume set's volume (its capacity): `INDEX.img` beside the directory `INDEX/` it is mounted
//   on while replicas use it; it stays until the volume set goes.
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { command, quietly } from './command.js';

const IMAGE = 'disk.img';
const MOUNT = 'disk';

/** Makes and mounts the replica's disk under `replicaDir`; gives where it is mounted. */
export async function mountDisk(replicaDir: string, bytes: number): Promise<string> {
  const image = join(replicaDir, IMAGE);
  const mount = join(replicaDir, MOUNT);
  mkdirSync(mount, { recursive: true });
  if (mounted(mount)) return mount;
  rmSync(image, { force: true });
  await makeFilesystem(image, bytes);
  // A loop mount detaches its loop device when it is unmounted.
  await command('mount', ['-o', 'loop', image, mount]);
  return mount;
}

async function makeFilesystem(image: string, bytes: number): Promise<void> {
  writeFileSync(image, '', { mode: 0o600 });
  truncateSync(image, bytes);
  // No reserved blocks (the replica may use it all) and no journal (less of the size taken, and less written).
  await command('mkfs.ext4', ['-q', '-F', '-m', '0', '-O', '^has_journal', image]);
}

/**
 * The volume sets' volumes in use, each mounted while at least one replica uses it. Mounts and
 * unmounts happen one at a time, so replicas starting together share one mount.
 */
export class VolumeDisks {
  private readonly users = new Map<string, number>();
  private turn: Promise<unknown> = Promise.resolve();

  private serially<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.turn.then(fn);
    this.turn = next.catch(() => undefined);
    return next;
  }

  /**
   * Mounts the volume at `dir` (made, of `bytes`, on its first use). A directory with data from
   * before volumes had a size of their own stays a plain directory.
   */
  acquire(dir: string, bytes: number): Promise<void> {
    return this.serially(async () => {
      const n = this.users.get(dir) ?? 0;
      const image = `${dir}.img`;
      if (n === 0 && !mounted(dir) && !(!existsSync(image) && existsSync(dir) && readdirSync(dir).length > 0)) {
        const fresh = !existsSync(image);
        if (fresh) await makeFilesystem(image, bytes);
        mkdirSync(dir, { recursive: true });
        await command('mount', ['-o', 'loop,nosuid,nodev', image, dir]);
        if (fresh) {
          // An empty volume, writable by an image's non-root user, as a plain directory was.
          rmSync(`${dir}/lost+found`, { recursive: true, force: true });
          chmodSync(dir, 0o777);
        }
      }
      this.users.set(dir, n + 1);
    });
  }

  /** A replica no longer uses the volume at `dir`: after the last one, it is unmounted. */
  release(dir: string): Promise<void> {
    return this.serially(async () => {
      const n = (this.users.get(dir) ?? 1) - 1;
      if (n > 0) return void this.users.set(dir, n);
      this.users.delete(dir);
      if (mounted(dir)) await quietly('umount', [dir]);
    });
  }

  /** Unmounts every volume under `root` (a volume set going, or what a killed Keel left), in use or not. */
  unmountUnder(root: string): Promise<void> {
    return this.serially(async () => {
      for (const path of mountsUnder(root)) {
        this.users.delete(path);
        // Lazily: a replica still holding it keeps it until it stops.
        await quietly('umount', ['-l', path]);
      }
    });
  }
}

/** Unmounts the replica's disk, if it is mounted, and removes its file. */
export async function unmountDisk(replicaDir: string): Promise<void> {
  const mount = join(replicaDir, MOUNT);
  if (existsSync(mount) && mounted(mount)) await quietly('umount', [mount]);
  rmSync(join(replicaDir, IMAGE), { force: true });
}

const mountPoints = () =>
  readFileSync('/proc/self/mounts', 'utf8')
    .split('\n')
    .map((line) => line.split(' ')[1])
    .filter(Boolean);

function mounted(path: string): boolean {
  return mountPoints().includes(path);
}

function mountsUnder(root: string): string[] {
  return mountPoints().filter((path) => path.startsWith(`${root}/`));
}
