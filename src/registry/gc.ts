// Garbage collection: content no image item of any org reaches (through its manifest, an index's
// manifests, their configs and layers, and the manifests that refer to those) is removed. Content
// stored or linked within the grace period is kept whatever refers to it: an upload whose
// manifest has not been pushed yet, or a manifest whose tag is being written, still needs it.
// Upload sessions idle for KEEL_REGISTRY_UPLOAD_IDLE_MS go first, with what they had received.
import { listAll } from '../store/list-all.js';
import type { Store } from '../store/types.js';
import { reach } from './repositories.js';
import type { RegistryStorage } from './storage.js';

/** How long fresh content is safe from collection. */
export const GC_GRACE_MS = 60 * 60 * 1000;

export async function collectGarbage(store: Store, { blobs, uploads }: RegistryStorage, graceMs = GC_GRACE_MS): Promise<{ removed: number; kept: number }> {
  await uploads.expire();
  // Candidates first: content stored after this read is not among them, whatever the marking finds.
  const candidates = await blobs.candidates(new Date(Date.now() - graceMs).toISOString());
  if (candidates.length === 0) return { removed: 0, kept: 0 };
  const reachable = new Set<string>();
  for (const org of await store.orgs()) {
    const tagged: string[] = [];
    for (const image of await listAll(store, org, 'image', '')) {
      if (typeof image.data.digest === 'string') tagged.push(image.data.digest);
    }
    await reach(blobs, org, tagged, reachable, true, async () => {});
  }
  let removed = 0;
  for (const digest of candidates) {
    if (reachable.has(digest)) continue;
    await blobs.remove(digest);
    removed++;
  }
  return { removed, kept: candidates.length - removed };
}
