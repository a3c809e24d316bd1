// A replica's own disk: a sparse file of KEEL_REPLICA_DISK_BYTES in its directory, made an ext4
// filesystem (no journal) and loop-mounted. The upper layers of its containers' overlays and its
// scratch volumes live on it, so what the replica writes is bounded by the file's size: past it
// the replica's writes fail with ENOSPC and the host's disk does not fill. The file takes on the
// host only what has been written to it, and goes with the replica (docs/runtime.md, "Disk").
import { existsSync, mkdirSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
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
  writeFileSync(image, '', { mode: 0o600 });
  truncateSync(image, bytes);
  // No reserved blocks (the replica may use it all) and no journal (a replica's disk does not outlive a crash of the host).
  await command('mkfs.ext4', ['-q', '-F', '-m', '0', '-O', '^has_journal', image]);
  // A loop mount detaches its loop device when it is unmounted.
  await command('mount', ['-o', 'loop', image, mount]);
  return mount;
}

/** Unmounts the replica's disk, if it is mounted, and removes its file. */
export async function unmountDisk(replicaDir: string): Promise<void> {
  const mount = join(replicaDir, MOUNT);
  if (existsSync(mount) && mounted(mount)) await quietly('umount', [mount]);
  rmSync(join(replicaDir, IMAGE), { force: true });
}

function mounted(path: string): boolean {
  return readFileSync('/proc/self/mounts', 'utf8')
    .split('\n')
    .some((line) => line.split(' ')[1] === path);
}
