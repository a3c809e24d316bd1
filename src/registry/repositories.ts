// Which repository holds which content: what was uploaded or mounted into it and what its
// manifests name. Content linked before repositories were recorded is assigned to the
// repositories whose tags reach it, once, when a process finds org links that no repository
// holds; what no tag reaches (an upload whose manifest never came) is assigned to none, and its
// link goes: garbage collection takes it as it would have.
import { listAll } from '../store/list-all.js';
import type { Store } from '../store/types.js';
import { readWhole, type BlobStore, type Linked } from './blobs.js';
import { isIndex, MAX_MANIFEST_BYTES } from './manifests.js';

/**
 * Visits what `roots` reach in the org, each digest once (over every call sharing `seen`): the
 * manifests, their configs and layers or an index's manifests, and, with `referrers`, the
 * manifests of the org whose subject is any of those. Digests the org does not link are not visited.
 */
export async function reach(blobs: BlobStore, org: string, roots: string[], seen: Set<string>, referrers: boolean, visit: (digest: string, linked: Linked) => Promise<void>): Promise<void> {
  const pending = [...roots];
  while (pending.length) {
    const digest = pending.pop()!;
    if (seen.has(digest)) continue;
    seen.add(digest);
    const linked = await blobs.linked(org, digest);
    if (!linked) continue;
    await visit(digest, linked);
    if (!linked.mediaType) continue;
    if (referrers) for (const referrer of await blobs.referrers(org, digest)) pending.push(referrer.digest);
    if (linked.size > MAX_MANIFEST_BYTES) continue;
    const manifest = JSON.parse((await readWhole(blobs, digest)).toString('utf8')) as Record<string, any>;
    const named = isIndex(linked.mediaType) ? (manifest.manifests ?? []) : [manifest.config, ...(manifest.layers ?? [])];
    for (const d of named) if (typeof d?.digest === 'string') pending.push(d.digest);
  }
}

export async function assignRepositories(store: Store, blobs: BlobStore): Promise<void> {
  if (!(await blobs.unassigned())) return;
  for (const org of await store.orgs()) {
    const byRepository = new Map<string, string[]>();
    for (const image of await listAll(store, org, 'image', '')) {
      const { repository, digest } = image.data as { repository?: unknown; digest?: unknown };
      if (typeof repository !== 'string' || typeof digest !== 'string') continue;
      byRepository.set(repository, [...(byRepository.get(repository) ?? []), digest]);
    }
    for (const [repository, digests] of byRepository) {
      // Referrers pushed by digest were recorded for the org alone: they go with their subject.
      await reach(blobs, org, digests, new Set(), true, (digest) => blobs.hold(org, repository, digest));
    }
  }
  await blobs.forgetUnassigned();
}
