// A replica's volumes as host directories, bind-mounted into its containers (docs/runtime.md,
// "Volumes"). Each URI names what it names in the workload's own org and GVC (kinds/volumeuri.ts
// admits no other form), so one org's workloads reach nothing of another's:
// - cpln://volumeset/NAME: a volume of the volume set's, per location and replica index (or one
//   for all replicas of a `shared` set), under runtime/volumes/: a filesystem of the set's
//   capacity (disk.ts) mounted on its directory while replicas use it; it outlives replicas and
//   the workload, and goes when the volume set is deleted;
// - cpln://secret/NAME[.KEY]: the secret's value as read-only files, written for the replica when
//   the workload's identity is granted `reveal` on it, and removed with the replica;
// - scratch://NAME: an empty directory of the replica's own, shared by its containers, on the
//   replica's disk (disk.ts), so that it shares the replica's bound;
// - cloud storage: not mounted; the replica does not start, and says why.
import { chmodSync, existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { Authorizer } from '../auth/authorizer.js';
import { parseVolumeUri } from '../kinds/volumeuri.js';
import type { Store } from '../store/types.js';
import type { VolumeDisks } from './disk.js';
import { revealedSecret, secretFiles } from './reveal.js';
import type { DeploymentRef } from './types.js';

/** A volume that cannot be given to the replica: the replica waits, with this as its message. */
export class VolumeError extends Error {}

export interface BindMount {
  destination: string;
  source: string;
  readonly: boolean;
}

type VolumeSpec = { uri?: string; path?: string };
type ContainerVolumes = { name?: string; volumes?: VolumeSpec[] };

/** Where a volume set's volumes live on this host. */
export function volumeSetDir(runtimeDir: string, org: string, gvc: string, name: string): string {
  return join(runtimeDir, 'volumes', org, gvc, name);
}

/** The volume sets whose data is kept under `runtimeDir`. */
export function volumeSetsIn(runtimeDir: string): Array<{ org: string; gvc: string; name: string }> {
  const list = (dir: string) => (existsSync(dir) ? readdirSync(dir) : []);
  const root = join(runtimeDir, 'volumes');
  return list(root).flatMap((org) => list(join(root, org)).flatMap((gvc) => list(join(root, org, gvc)).map((name) => ({ org, gvc, name }))));
}

/**
 * Makes the directories and files of the replica's volumes (its secrets under `replicaDir`, its
 * scratch volumes under `diskDir`, its volume sets' volumes mounted by `volumes`, each added to
 * `acquired` for the replica to release) and gives each container's bind mounts; throws
 * VolumeError when a volume cannot be had.
 */
export async function prepareVolumes(
  store: Store,
  auth: Authorizer,
  runtimeDir: string,
  replicaDir: string,
  diskDir: string,
  volumes: { disks: VolumeDisks; acquired: string[] },
  ref: DeploymentRef,
  replica: string,
  spec: Record<string, any>,
): Promise<Map<string, BindMount[]>> {
  const mounts = new Map<string, BindMount[]>();
  const own = join(replicaDir, 'volumes');
  for (const [i, container] of ((spec.containers ?? []) as ContainerVolumes[]).entries()) {
    const list: BindMount[] = [];
    mounts.set(String(container.name), list);
    for (const [j, volume] of (container.volumes ?? []).entries()) {
      const uri = String(volume.uri ?? '');
      const path = String(volume.path ?? '');
      const fail = (why: string) => new VolumeError(`Volume ${uri} at ${path} of container ${container.name}: ${why}`);
      const source = parseVolumeUri(uri);
      if (!source) throw fail('not a volume URI');
      if (source.kind === 'cloud') throw fail(`${source.scheme}:// cloud storage is not mounted by Keel's runc runtime`);
      if (source.kind === 'volumeset') {
        const set = await store.get({ org: ref.org, kind: 'volumeset', gvc: ref.gvc, name: source.name });
        if (!set) throw fail(`volume set ${source.name} does not exist in GVC ${ref.gvc}`);
        let leaf: string;
        if ((set.data.spec as { fileSystemType?: string } | undefined)?.fileSystemType === 'shared') leaf = 'shared';
        else if (spec.type === 'stateful' && replica.startsWith(`${ref.workload}-`) && /^\d+$/.test(replica.slice(ref.workload.length + 1))) leaf = replica.slice(ref.workload.length + 1);
        else throw fail(`volume set ${source.name} is ${(set.data.spec as { fileSystemType?: string } | undefined)?.fileSystemType ?? 'ext4'}: only a stateful workload mounts it (one volume per replica); a shared volume set mounts on any workload`);
        const dir = join(volumeSetDir(runtimeDir, ref.org, ref.gvc, source.name), ref.location, leaf);
        privateDir(join(runtimeDir, 'volumes'));
        mkdirSync(dirname(dir), { recursive: true });
        if (!volumes.acquired.includes(dir)) {
          const gib = Number((set.data.spec as { initialCapacity?: unknown } | undefined)?.initialCapacity ?? 10);
          await volumes.disks.acquire(dir, Math.max(10, Number.isFinite(gib) ? gib : 10) * 1024 ** 3);
          volumes.acquired.push(dir);
        }
        list.push({ destination: path, source: dir, readonly: false });
      } else if (source.kind === 'scratch') {
        const scratch = join(diskDir, 'scratch');
        const dir = join(scratch, source.name);
        privateDir(scratch);
        if (makeDir(dir)) chmodSync(dir, 0o777);
        list.push({ destination: path, source: dir, readonly: false });
      } else {
        const secret = await revealedSecret(store, auth, ref, spec, source.name);
        if (typeof secret === 'string') throw fail(secret);
        const files = secretFiles(secret, source.key);
        if (typeof files === 'string') throw fail(files);
        // Named by position: a container's name may be any string, not a file name.
        const dir = join(own, `secret-${i}-${j}`);
        privateDir(own);
        rmSync(dir, { recursive: true, force: true });
        mkdirSync(dir, { mode: 0o755 });
        chmodSync(dir, 0o755);
        // Readable by the container's user, whichever it is (Keel's own umask would leave them root's).
        for (const [name, content] of Object.entries(files)) {
          writeFileSync(join(dir, name), content, { mode: 0o444 });
          chmodSync(join(dir, name), 0o444);
        }
        list.push({ destination: path, source: dir, readonly: true });
      }
    }
  }
  return mounts;
}

/** A directory only root may enter: what is under it is reached by the containers' bind mounts alone. */
function privateDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
}

/** Makes a directory (and its parents); true when it did not exist. */
function makeDir(dir: string): boolean {
  return mkdirSync(dir, { recursive: true }) !== undefined;
}
