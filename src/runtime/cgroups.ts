// The cgroups of a data directory's containers (`/keel-SCOPE-RUNCID` in every hierarchy; with
// cgroup v1 or the hybrid layout, one per controller). runc removes a container's own when it deletes
// it, but gives up on one still busy (processes of it not yet gone) and knows nothing of one whose
// container it no longer lists (a Keel killed mid-start): those are removed here, once their
// processes are killed and gone.
import { existsSync, readdirSync, readFileSync, rmdirSync } from 'node:fs';
import { join } from 'node:path';

const ROOT = '/sys/fs/cgroup';
/** How long a cgroup's killed processes get to be gone before its removal is given up on. */
const GONE_MS = 10_000;
const RECHECK_MS = 50;

/** The cgroup directories, in every hierarchy, whose names start with `prefix` (`keel-SCOPE-`, or that and a replica's id). */
export function cgroupsNamed(prefix: string): string[] {
  if (!existsSync(ROOT)) return [];
  const hierarchies = existsSync(join(ROOT, 'cgroup.controllers')) ? [ROOT] : readdirSync(ROOT).map((h) => join(ROOT, h));
  return hierarchies.flatMap((h) => {
    try {
      return readdirSync(h, { withFileTypes: true })
        .filter((e) => e.isDirectory() && e.name.startsWith(prefix))
        .map((e) => join(h, e.name));
    } catch {
      return [];
    }
  });
}

/**
 * Kills what still runs in the cgroups and removes them. The kernel refuses to remove a cgroup until
 * its processes have exited, which a SIGKILL starts but does not finish: the removal is tried again
 * until they are gone (there is no event for it in cgroup v1). Resolves with those it could not remove.
 */
export async function removeCgroups(dirs: string[]): Promise<string[]> {
  const deadline = Date.now() + GONE_MS;
  let left = dirs;
  for (;;) {
    left = left.filter((dir) => !removed(dir));
    if (left.length === 0 || Date.now() >= deadline) return left;
    await new Promise((resolve) => setTimeout(resolve, RECHECK_MS));
  }
}

function removed(dir: string): boolean {
  for (const pid of procsOf(dir)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // Gone already.
    }
  }
  try {
    rmdirSync(dir);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ENOENT';
  }
}

function procsOf(dir: string): number[] {
  try {
    return readFileSync(join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean).map(Number);
  } catch {
    return [];
  }
}
