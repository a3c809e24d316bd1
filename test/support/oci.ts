// Small OCI images for registry tests, written by the test itself into an OCI image layout: each
// layer a gzipped tar of files the test names (made by the system tar), then config, manifest
// and index.json. No daemon, no network.
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

export interface OciImage {
  /** The layout directory (skopeo's `oci:DIR:TAG`). */
  dir: string;
  tag: string;
  /** Digest of the image manifest. */
  digest: string;
  manifest: Record<string, any>;
  /** Digests of the config and layers. */
  blobs: string[];
}

const sha256 = (bytes: Buffer) => `sha256:${createHash('sha256').update(bytes).digest('hex')}`;

/**
 * An image of `layers` (each a map of path to content, or a size in bytes of random content) in a
 * fresh OCI layout under `root`.
 */
export function buildOciImage(root: string, tag: string, layers: Array<Record<string, string | number>>): OciImage {
  const dir = mkdtempSync(join(root, 'oci-'));
  const blobDir = join(dir, 'blobs', 'sha256');
  mkdirSync(blobDir, { recursive: true });
  const putBlob = (bytes: Buffer) => {
    const digest = sha256(bytes);
    writeFileSync(join(blobDir, digest.slice(7)), bytes);
    return { digest, size: bytes.length };
  };
  const layerDescriptors = [];
  const diffIds = [];
  for (const files of layers) {
    const rootfs = mkdtempSync(join(tmpdir(), 'oci-rootfs-'));
    for (const [path, content] of Object.entries(files)) {
      mkdirSync(dirname(join(rootfs, path)), { recursive: true });
      writeFileSync(join(rootfs, path), typeof content === 'number' ? randomBytes(content) : content);
    }
    const tar = execFileSync('tar', ['-C', rootfs, '--sort=name', '--owner=0', '--group=0', '--mtime=@0', '-cf', '-', '.'], { maxBuffer: 1 << 30 });
    rmSync(rootfs, { recursive: true, force: true });
    diffIds.push(sha256(tar));
    const gz = execFileSync('gzip', ['-n', '-1'], { input: tar, maxBuffer: 1 << 30 });
    layerDescriptors.push({ mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', ...putBlob(gz) });
  }
  const config = Buffer.from(JSON.stringify({ architecture: 'amd64', os: 'linux', config: { Cmd: ['/bin/true'] }, rootfs: { type: 'layers', diff_ids: diffIds } }));
  const configDescriptor = { mediaType: 'application/vnd.oci.image.config.v1+json', ...putBlob(config) };
  const manifest = { schemaVersion: 2, mediaType: 'application/vnd.oci.image.manifest.v1+json', config: configDescriptor, layers: layerDescriptors };
  const manifestDescriptor = putBlob(Buffer.from(JSON.stringify(manifest)));
  writeFileSync(join(dir, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
  writeFileSync(
    join(dir, 'index.json'),
    JSON.stringify({ schemaVersion: 2, manifests: [{ mediaType: 'application/vnd.oci.image.manifest.v1+json', ...manifestDescriptor, annotations: { 'org.opencontainers.image.ref.name': tag } }] }),
  );
  return { dir, tag, digest: manifestDescriptor.digest, manifest, blobs: [configDescriptor.digest, ...layerDescriptors.map((l) => l.digest)] };
}

/** The manifest digest an OCI layout names for a tag. */
export function layoutDigest(dir: string, tag: string): string {
  const index = JSON.parse(readFileSync(join(dir, 'index.json'), 'utf8')) as { manifests: Array<{ digest: string; annotations?: Record<string, string> }> };
  const entry = index.manifests.find((m) => m.annotations?.['org.opencontainers.image.ref.name'] === tag);
  if (!entry) throw new Error(`no ${tag} in ${dir}`);
  return entry.digest;
}

export const OCI_MANIFEST = 'application/vnd.oci.image.manifest.v1+json';

/** The content digest of some bytes, as the registry names them. */
export const sha = (bytes: Buffer | string) => `sha256:${createHash('sha256').update(bytes).digest('hex')}`;

/** An image manifest's JSON text naming a config and layers (by digest and size), with `extra` fields. */
export function manifestOf(config: { digest: string; size: number }, layers: Array<{ digest: string; size: number }>, extra: Record<string, unknown> = {}): string {
  return JSON.stringify({
    schemaVersion: 2,
    mediaType: OCI_MANIFEST,
    config: { mediaType: 'application/vnd.oci.image.config.v1+json', ...config },
    layers: layers.map((l) => ({ mediaType: 'application/vnd.oci.image.layer.v1.tar', ...l })),
    ...extra,
  });
}
