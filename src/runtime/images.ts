// Images for the runc runtime: a reference resolves to an OCI image layout and a manifest digest,
// and each digest is unpacked once (umoci, which applies whiteouts) into a root filesystem that
// every replica of that image shares read-only (each replica writes to an overlay of its own).
// Sources: `oci:<absolute dir>:<tag>` (a layout on this host); an image of the workload's org's
// registry (its blobs copied out of Keel's blob storage into a layout; never another org's); any
// other reference is copied from its registry with skopeo.
import { createHash } from 'node:crypto';
import { createWriteStream, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { isAbsolute, join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { BlobStore } from '../registry/blobs.js';
import { registryImage } from '../kinds/registryimage.js';
import type { Store } from '../store/types.js';
import { command, CommandError } from './command.js';

/** The parts of an image's config a container starts from. */
export interface ImageConfig {
  Entrypoint?: string[];
  Cmd?: string[];
  Env?: string[];
  WorkingDir?: string;
  User?: string;
}

export interface Unpacked {
  digest: string;
  rootfs: string;
  config: ImageConfig;
}

const INDEX_TYPES = new Set(['application/vnd.oci.image.index.v1+json', 'application/vnd.docker.distribution.manifest.list.v2+json']);
const ARCH: Record<string, string> = { x64: 'amd64', arm64: 'arm64', arm: 'arm', ia32: '386', ppc64: 'ppc64le', s390x: 's390x', riscv64: 'riscv64' };
export const HOST_ARCH = ARCH[process.arch] ?? process.arch;
const TAG = 'keel';

export class ImageError extends Error {}

export class Images {
  private readonly unpacking = new Map<string, Promise<string>>();
  /** Layouts being written, by directory (one per manifest digest or, from skopeo, per reference). */
  private readonly writing = new Map<string, Promise<string>>();

  constructor(
    private readonly dir: string,
    private readonly store: Store,
    private readonly blobs: BlobStore,
    private readonly registryHosts: () => string[],
    private readonly hostImagesOrg?: string,
  ) {}

  /** The image `reference` (of a workload in `org`), unpacked. Fails with an ImageError saying why. */
  async prepare(org: string, reference: string): Promise<Unpacked> {
    const { layout, tag } = await this.layoutOf(org, reference);
    const { digest, config } = readImage(layout, tag, reference);
    let done = this.unpacking.get(digest);
    if (!done) {
      done = this.unpack(layout, tag, digest);
      this.unpacking.set(digest, done);
      done.catch(() => this.unpacking.delete(digest));
    }
    return { digest, rootfs: await done, config };
  }

  private async unpack(layout: string, tag: string, digest: string): Promise<string> {
    const target = join(this.dir, 'unpacked', digest.replace(':', '-'));
    const rootfs = join(target, 'rootfs');
    if (existsSync(join(target, 'done'))) return rootfs;
    const partial = `${target}.partial`;
    rmSync(partial, { recursive: true, force: true });
    rmSync(target, { recursive: true, force: true });
    mkdirSync(partial, { recursive: true });
    try {
      await command('umoci', ['raw', 'unpack', '--image', `${layout}:${tag}`, join(partial, 'rootfs')], { timeoutMs: 600_000 });
    } catch (err) {
      rmSync(partial, { recursive: true, force: true });
      throw new ImageError(`Failed to unpack image ${digest}: ${(err as Error).message}`);
    }
    writeFileSync(join(partial, 'done'), digest);
    renameSync(partial, target);
    return rootfs;
  }

  /** The OCI layout and tag holding `reference`. */
  private async layoutOf(org: string, reference: string): Promise<{ layout: string; tag: string }> {
    if (reference.startsWith('oci:')) {
      const rest = reference.slice(4);
      const colon = rest.lastIndexOf(':');
      const layout = colon > 0 ? rest.slice(0, colon) : rest;
      const tag = colon > 0 ? rest.slice(colon + 1) : 'latest';
      // A host's layouts are the operator's: a tenant's workload could otherwise read any layout on the host.
      if (this.hostImagesOrg !== undefined && org !== this.hostImagesOrg) {
        throw new ImageError(`Failed to pull image "${reference}": oci: images (layouts on the Keel host) are only for workloads of the first org, ${this.hostImagesOrg}; push the image to this org's registry instead`);
      }
      if (!isAbsolute(layout)) throw new ImageError(`Failed to pull image "${reference}": an oci: image names an absolute directory (oci:/path/to/layout:tag)`);
      if (!existsSync(join(layout, 'index.json'))) throw new ImageError(`Failed to pull image "${reference}": ${layout} is not an OCI image layout (no index.json)`);
      return { layout, tag };
    }
    const own = registryImage(reference, org, this.registryHosts());
    // A workload runs only its own org's images: another org's reads as missing, whether it exists or not.
    if (own && own.org !== org) throw new ImageError(`Failed to pull image "${reference}": not found (a workload runs only images of its own org's registry)`);
    if (own) return { layout: await this.export(own.org, 'digest' in own ? own.digest : await this.tagged(own.org, own.name, reference), reference), tag: TAG };
    return { layout: await this.copy(reference), tag: TAG };
  }

  /** The manifest digest an org's registry holds under a tag (`REPO:TAG`). */
  private async tagged(org: string, name: string, reference: string): Promise<string> {
    const item = await this.store.get({ org, kind: 'image', gvc: '', name });
    if (!item) throw new ImageError(`Failed to pull image "${reference}": not found (no image ${name} in org ${org}'s registry)`);
    return String(item.data.digest);
  }

  /** A manifest of an org's registry as a layout, written once per manifest digest. */
  private async export(org: string, digest: string, reference: string): Promise<string> {
    if (!(await this.blobs.linked(org, digest))) throw new ImageError(`Failed to pull image "${reference}": not found (no manifest ${digest} in org ${org}'s registry)`);
    const layout = join(this.dir, 'layouts', digest.replace(':', '-'));
    return this.once(layout, () => this.write(digest, reference, layout));
  }

  /**
   * `write` of the layout directory `layout`, shared by every caller while it runs: replicas of
   * one image starting together would otherwise each clear the others' `.partial` directory.
   */
  private once(layout: string, write: () => Promise<string>): Promise<string> {
    let done = this.writing.get(layout);
    if (!done) {
      done = write().finally(() => this.writing.delete(layout));
      this.writing.set(layout, done);
    }
    return done;
  }

  private async write(digest: string, reference: string, layout: string): Promise<string> {
    if (existsSync(join(layout, 'index.json'))) return layout;
    const partial = `${layout}.partial`;
    rmSync(partial, { recursive: true, force: true });
    mkdirSync(join(partial, 'blobs', 'sha256'), { recursive: true });
    // Layers stream from blob storage to disk; only manifests and the config are read back.
    const copy = async (d: string): Promise<string> => {
      const file = join(partial, 'blobs', 'sha256', d.slice('sha256:'.length));
      if (!existsSync(file)) await pipeline(this.blobs.read(d), createWriteStream(file));
      return file;
    };
    const json = async (d: string): Promise<{ text: Buffer; value: any }> => {
      const text = readFileSync(await copy(d));
      return { text, value: JSON.parse(text.toString('utf8')) };
    };
    const first = await json(digest);
    let manifest = first.value;
    let top = { mediaType: String(manifest.mediaType ?? 'application/vnd.oci.image.manifest.v1+json'), digest, size: first.text.length };
    if (INDEX_TYPES.has(manifest.mediaType)) {
      const chosen = pickPlatform(manifest, reference);
      manifest = (await json(chosen.digest)).value;
      top = { mediaType: chosen.mediaType, digest: chosen.digest, size: chosen.size };
    }
    for (const d of [manifest.config, ...(manifest.layers ?? [])]) await copy(String(d.digest));
    writeFileSync(join(partial, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
    writeFileSync(join(partial, 'index.json'), JSON.stringify({ schemaVersion: 2, manifests: [{ ...top, annotations: { 'org.opencontainers.image.ref.name': TAG } }] }));
    rmSync(layout, { recursive: true, force: true });
    renameSync(partial, layout);
    return layout;
  }

  /** An image of another registry, copied with skopeo into a layout (once per reference). */
  private copy(reference: string): Promise<string> {
    const layout = join(this.dir, 'layouts', `ref-${createHash('sha256').update(reference).digest('hex').slice(0, 32)}`);
    return this.once(layout, () => this.pull(reference, layout));
  }

  private async pull(reference: string, layout: string): Promise<string> {
    if (existsSync(join(layout, 'index.json'))) return layout;
    const partial = `${layout}.partial`;
    rmSync(partial, { recursive: true, force: true });
    try {
      await command('skopeo', ['copy', '--override-arch', HOST_ARCH, `docker://${reference}`, `oci:${partial}:${TAG}`], { timeoutMs: 600_000 });
    } catch (err) {
      rmSync(partial, { recursive: true, force: true });
      const why = err instanceof CommandError ? err.stderr.trim().split('\n').pop() : (err as Error).message;
      throw new ImageError(`Failed to pull image "${reference}": ${why}`);
    }
    renameSync(partial, layout);
    return layout;
  }
}

/** The manifest digest and config of the image tagged `tag` in `layout`, checked against this host's architecture. */
function readImage(layout: string, tag: string, reference: string): { digest: string; config: ImageConfig } {
  const blob = (digest: string) => JSON.parse(readFileSync(join(layout, 'blobs', ...digest.split(':')), 'utf8'));
  let index;
  try {
    index = JSON.parse(readFileSync(join(layout, 'index.json'), 'utf8'));
  } catch (err) {
    throw new ImageError(`Failed to pull image "${reference}": unreadable index.json (${(err as Error).message})`);
  }
  let descriptor = (index.manifests ?? []).find((m: any) => m.annotations?.['org.opencontainers.image.ref.name'] === tag);
  if (!descriptor) throw new ImageError(`Failed to pull image "${reference}": not found (no tag ${tag} in ${layout})`);
  let manifest = blob(descriptor.digest);
  if (INDEX_TYPES.has(descriptor.mediaType) || INDEX_TYPES.has(manifest.mediaType)) {
    descriptor = pickPlatform(manifest, reference);
    manifest = blob(descriptor.digest);
  }
  const config = blob(manifest.config.digest);
  if (config.architecture && config.architecture !== HOST_ARCH) {
    throw new ImageError(`Failed to pull image "${reference}": the image is built for ${config.os ?? 'linux'}/${config.architecture}, and this host runs linux/${HOST_ARCH} (exec format error)`);
  }
  return { digest: String(descriptor.digest), config: (config.config ?? {}) as ImageConfig };
}

function pickPlatform(index: { manifests?: Array<Record<string, any>> }, reference: string): { digest: string; mediaType: string; size: number } {
  const all = index.manifests ?? [];
  const found = all.find((m) => m.platform?.architecture === HOST_ARCH && (m.platform?.os ?? 'linux') === 'linux');
  if (!found) {
    const offered = all.map((m) => `${m.platform?.os}/${m.platform?.architecture}`).join(', ');
    throw new ImageError(`Failed to pull image "${reference}": no manifest for linux/${HOST_ARCH} (the image offers ${offered || 'none'})`);
  }
  return { digest: String(found.digest), mediaType: String(found.mediaType), size: Number(found.size) };
}
