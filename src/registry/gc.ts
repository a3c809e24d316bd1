// Garbage collection: content no image item of any org reaches (through its manifest, an index's
// manifests, their configs and layers, and the manifests that refer to those) is removed. Content
// stored or linked within the grace period is kept whatever refers to it: an upload whose
// manifest has not been pushed yet, or a manifest whose tag is being written, still needs it.
// Upload sessions abandoned for an hour go first, with what they had received.
import { listAll } from '../reconcile/common.js';
import type { Store } from '../store/types.js';
import type { BlobStore } from './blobs.js';
import { isIndex, MAX_MANIFEST_BYTES } from './manifests.js';
import type { RegistryStorage } from './storage.js';
import { ABANDONED_MS } from './uploads.js';

/** How long fresh content is safe from collection. */
export const GC_GRACE_MS = 60 * 60 * 1000;

export async function collectGarbage(store: Store, { blobs, uploads }: RegistryStorage, graceMs = GC_GRACE_MS): Promise<{ removed: number; kept: number }> {
  await uploads.expire(Date.now() - ABANDONED_MS);
  // Candidates first: content stored after this read is not among them, whatever the marking finds.
  const candidates = await blobs.candidates(new Date(Date.now() - graceMs).toISOString());
  if (candidates.length === 0) return { removed: 0, kept: 0 };
  const reachable = new Set<string>();
  const pending: Array<{ org: string; digest: string }> = [];
  for (const org of await store.orgs()) {
    for (const image of await listAll(store, org, 'image', '')) {
      if (typeof image.data.digest === 'string') pending.push({ org, digest: image.data.digest });
    }
  }
  while (pending.length) {
    const { org, digest } = pending.pop()!;
    if (reachable.has(digest)) continue;
    reachable.add(digest);
    const linked = await blobs.linked(org, digest);
    if (!linked?.mediaType) continue;
    for (const referrer of await blobs.referrers(org, digest)) pending.push({ org, digest: referrer.digest });
    if (linked.size > MAX_MANIFEST_BYTES) continue;
    const manifest = JSON.parse((await readAll(blobs, digest)).toString('utf8')) as Record<string, any>;
    const named = isIndex(linked.mediaType) ? (manifest.manifests ?? []) : [manifest.config, ...(manifest.layers ?? [])];
    for (const d of named) if (typeof d?.digest === 'string') pending.push({ org, digest: d.digest });
  }
  let removed = 0;
  for (const digest of candidates) {
    if (reachable.has(digest)) continue;
    await blobs.remove(digest);
    removed++;
  }
  return { removed, kept: candidates.length - removed };
}

async function readAll(blobs: BlobStore, digest: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of blobs.read(digest)) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}
