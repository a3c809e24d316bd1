// Manifests the registry accepts, and the content each one names.
import { RegistryError } from './errors.js';

export const OCI_MANIFEST = 'application/vnd.oci.image.manifest.v1+json';
export const OCI_INDEX = 'application/vnd.oci.image.index.v1+json';
export const DOCKER_MANIFEST = 'application/vnd.docker.distribution.manifest.v2+json';
export const DOCKER_LIST = 'application/vnd.docker.distribution.manifest.list.v2+json';

const INDEXES = new Set([OCI_INDEX, DOCKER_LIST]);
export const MANIFEST_TYPES = new Set([OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST, DOCKER_LIST]);

/** Largest manifest accepted (the distribution spec suggests registries accept at least 4 MiB). */
export const MAX_MANIFEST_BYTES = 4 * 1024 * 1024;

/** Repository names as the distribution spec defines them: no `..`, no leading or doubled separators. */
const REPOSITORY = /^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:\/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*$/;
export const TAG = /^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$/;
export const DIGEST = /^sha256:[a-f0-9]{64}$/;

export const isRepository = (name: string) => name.length <= 255 && REPOSITORY.test(name);

export function checkRepository(name: string): void {
  if (!isRepository(name)) throw new RegistryError('NAME_INVALID', `invalid repository name '${name.slice(0, 300)}'`, 400);
}

export function checkDigest(digest: string): void {
  if (!DIGEST.test(digest)) throw new RegistryError('DIGEST_INVALID', `'${digest.slice(0, 100)}' is not a sha256 digest`, 400);
}

export interface Descriptor {
  mediaType?: string;
  digest: string;
  size: number;
  artifactType?: string;
  annotations?: Record<string, string>;
  platform?: Record<string, unknown>;
}

export interface ParsedManifest {
  mediaType: string;
  body: Record<string, any>;
  /** Blobs (config and layers) it names. */
  blobs: Descriptor[];
  /** Manifests it names (an index's entries). */
  manifests: Descriptor[];
  subject?: Descriptor;
  artifactType?: string;
}

/**
 * Parses a pushed manifest: its media type (from the body, else the Content-Type) must be one the
 * registry knows, and every descriptor must be well formed.
 */
export function parseManifest(bytes: Buffer, contentType: string | undefined): ParsedManifest {
  let body: unknown;
  try {
    body = JSON.parse(bytes.toString('utf8'));
  } catch {
    throw new RegistryError('MANIFEST_INVALID', 'the manifest is not JSON', 400);
  }
  if (!body || typeof body !== 'object' || Array.isArray(body)) throw new RegistryError('MANIFEST_INVALID', 'the manifest must be a JSON object', 400);
  const manifest = body as Record<string, any>;
  const declared = typeof manifest.mediaType === 'string' ? manifest.mediaType : undefined;
  const header = contentType?.split(';')[0].trim();
  const mediaType = declared ?? header ?? '';
  if (!MANIFEST_TYPES.has(mediaType)) throw new RegistryError('MANIFEST_INVALID', `unsupported manifest media type '${mediaType.slice(0, 200)}'`, 400, { accepted: [...MANIFEST_TYPES] });
  if (declared && header && header !== declared && MANIFEST_TYPES.has(header)) {
    throw new RegistryError('MANIFEST_INVALID', `the manifest's mediaType '${declared}' differs from its Content-Type '${header}'`, 400);
  }
  if (manifest.schemaVersion !== 2) throw new RegistryError('MANIFEST_INVALID', 'schemaVersion must be 2', 400);
  const descriptor = (value: unknown, path: string): Descriptor => {
    const d = value as Descriptor;
    if (!d || typeof d !== 'object' || typeof d.digest !== 'string' || !DIGEST.test(d.digest) || !Number.isSafeInteger(d.size) || d.size < 0) {
      throw new RegistryError('MANIFEST_INVALID', `${path} is not a valid descriptor (sha256 digest and size)`, 400);
    }
    return d;
  };
  const list = (value: unknown, path: string): Descriptor[] => {
    if (!Array.isArray(value)) throw new RegistryError('MANIFEST_INVALID', `${path} must be an array`, 400);
    return value.map((d, i) => descriptor(d, `${path}[${i}]`));
  };
  const subject = manifest.subject === undefined ? undefined : descriptor(manifest.subject, 'subject');
  if (INDEXES.has(mediaType)) {
    return { mediaType, body: manifest, blobs: [], manifests: list(manifest.manifests, 'manifests'), subject, artifactType: manifest.artifactType };
  }
  const config = descriptor(manifest.config, 'config');
  const layers = manifest.layers === undefined && mediaType === OCI_MANIFEST ? [] : list(manifest.layers, 'layers');
  return { mediaType, body: manifest, blobs: [config, ...layers], manifests: [], subject, artifactType: manifest.artifactType ?? config.mediaType };
}

/** Whether a stored manifest's media type is an index (whose entries are manifests). */
export const isIndex = (mediaType: string) => INDEXES.has(mediaType);
