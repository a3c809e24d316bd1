// Blob uploads in progress. A session receives bytes while hashing them, and only a finished
// session whose content has the digest the client names becomes a blob: nothing of an
// unfinished or unverified upload is ever visible. Two backends, like the blob store: temp files
// of this process beside SQLite, or rows in PostgreSQL that any Keel process on the database can
// continue (see postgres.ts).
import { createHash, randomUUID, type Hash } from 'node:crypto';
import { createWriteStream, mkdirSync, readdirSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Transform, type Readable, type Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { registryDir, type FileBlobStore } from './blobs.js';
import { RegistryError } from './errors.js';

export interface Upload {
  id: string;
  org: string;
  repository: string;
  /** Who started it (an identity of auth/principal.ts): the open sessions of each are bounded. */
  principal: string;
  /** Bytes received so far. */
  size: number;
}

export interface UploadSessions {
  /** A new session; TOOMANYREQUESTS when the principal has KEEL_REGISTRY_MAX_UPLOADS open already (idle ones expire first). */
  start(org: string, repository: string, principal: string): Promise<Upload>;
  /** The session, if it belongs to this org and repository. */
  find(org: string, repository: string, id: string): Promise<Upload>;
  /**
   * Appends a request body to the session. A body cut short (the client disconnected), refused
   * (too large) or shorter than `expectedLength` leaves the session as it was before this request.
   */
  append(upload: Upload, body: Readable, expectedLength?: number): Promise<void>;
  /** Ends the session: its content becomes the blob `claimed` (linked to the org's repository) if that is its digest, else it is dropped and DIGEST_INVALID thrown. */
  finish(upload: Upload, claimed: string): Promise<void>;
  cancel(upload: Upload): Promise<void>;
  /** Drops sessions idle for KEEL_REGISTRY_UPLOAD_IDLE_MS with their content; never one a request is writing to. */
  expire(): Promise<void>;
  /** The org's bound on stored bytes, over its content and its sessions. */
  readonly quota: OrgQuota;
  close(): Promise<void>;
}

/** The bounds every upload backend keeps. */
export interface UploadLimits {
  /** KEEL_REGISTRY_MAX_BLOB_BYTES */
  maxBlobBytes: number;
  /** KEEL_REGISTRY_MAX_BYTES_PER_ORG */
  maxOrgBytes: number;
  /** KEEL_REGISTRY_MAX_UPLOADS: open sessions per principal. */
  maxUploads: number;
  /** KEEL_REGISTRY_UPLOAD_IDLE_MS: a session untouched this long is abandoned. */
  idleMs: number;
}

export const tooManyUploads = (limit: number) =>
  new RegistryError('TOOMANYREQUESTS', `this principal has ${limit} upload sessions open already (KEEL_REGISTRY_MAX_UPLOADS): finish or cancel one first`, 429, { limit, setting: 'KEEL_REGISTRY_MAX_UPLOADS' });

/**
 * The org's bound on stored bytes (KEEL_REGISTRY_MAX_BYTES_PER_ORG): what it links, what its
 * sessions hold, and what this process is receiving for it at this moment, so that requests
 * received at once count each other's bytes before any of them is committed.
 */
export class OrgQuota {
  /** Bytes being received for each org: neither committed nor dropped yet, so not in what `usage` reads. */
  private readonly flowing = new Map<string, number>();
  /** Bytes this process committed for each org since it started (never lowered). */
  private readonly committed = new Map<string, number>();

  constructor(
    readonly maxBytes: number,
    /** What the store says the org holds: linked content and session bytes. */
    private readonly usage: (org: string) => Promise<number>,
  ) {}

  /**
   * A charge for one request's bytes: each call counts them and throws once the org would pass
   * its bound, counting what the store held when it opened, what this process committed since, and
   * every byte being received now. `close` says whether its bytes were committed.
   */
  async open(org: string): Promise<{ charge(bytes: number): void; close(committed: boolean): void }> {
    const mark = this.committed.get(org) ?? 0;
    const used = await this.usage(org);
    let mine = 0;
    return {
      charge: (bytes) => {
        this.flowing.set(org, (this.flowing.get(org) ?? 0) + bytes);
        mine += bytes;
        if (used + (this.committed.get(org) ?? 0) - mark + (this.flowing.get(org) ?? 0) > this.maxBytes) throw this.full();
      },
      close: (committed) => {
        const left = (this.flowing.get(org) ?? 0) - mine;
        if (left > 0) this.flowing.set(org, left);
        else this.flowing.delete(org);
        if (committed) this.committed.set(org, (this.committed.get(org) ?? 0) + mine);
        mine = 0;
      },
    };
  }

  /** Throws unless `bytes` more fit (a manifest, stored whole). */
  async admit(org: string, bytes: number): Promise<void> {
    if ((await this.usage(org)) + (this.flowing.get(org) ?? 0) + bytes > this.maxBytes) throw this.full();
  }

  private full(): RegistryError {
    return new RegistryError('DENIED', `the org's registry storage would pass ${this.maxBytes} bytes (KEEL_REGISTRY_MAX_BYTES_PER_ORG): delete images, then collect garbage`, 413, {
      limit: this.maxBytes,
      setting: 'KEEL_REGISTRY_MAX_BYTES_PER_ORG',
    });
  }
}

/**
 * The pass every appended byte takes: counted against the registry's blob limit and the org's
 * quota and, when the hash of what came before is at hand, hashed.
 */
export function meter(before: number, limit: number, hash: Hash | undefined, charge: (bytes: number) => void): Transform & { received: number } {
  const stage = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      stage.received += chunk.length;
      if (before + stage.received > limit) return done(new RegistryError('SIZE_INVALID', `the blob is larger than the registry accepts (${limit} bytes, KEEL_REGISTRY_MAX_BLOB_BYTES)`, 413));
      try {
        charge(chunk.length);
      } catch (err) {
        return done(err as Error);
      }
      hash?.update(chunk);
      done(null, chunk);
    },
  }) as Transform & { received: number };
  stage.received = 0;
  return stage;
}

/** Streams `body` through the meter into the sink (through the stages before it), then checks it was as long as announced. */
export async function receive(body: Readable, stage: Transform & { received: number }, expectedLength: number | undefined, ...sink: [...Transform[], Writable]): Promise<void> {
  try {
    await pipeline([body, stage, ...sink]);
  } catch (err) {
    // A client gone mid-body is the client's failure, not the server's.
    const cutShort = !(err instanceof RegistryError) && (body as { complete?: boolean }).complete === false;
    throw cutShort ? new RegistryError('BLOB_UPLOAD_INVALID', 'the upload was cut short', 400) : err;
  }
  if (expectedLength !== undefined && stage.received !== expectedLength) {
    throw new RegistryError('SIZE_INVALID', `received ${stage.received} bytes, but Content-Length said ${expectedLength}`, 400);
  }
}

export const uploadUnknown = () => new RegistryError('BLOB_UPLOAD_UNKNOWN', 'blob upload unknown to registry', 404);
export const uploadBusy = () => new RegistryError('BLOB_UPLOAD_INVALID', 'another request is writing to this upload', 416);
export const digestMismatch = (digest: string, claimed: string) => new RegistryError('DIGEST_INVALID', `the content's digest is ${digest}, not ${claimed}`, 400);

interface FileUpload extends Upload {
  file: string;
  /** The hash of the bytes received (kept as they arrive, so finishing needs no second read). */
  hash: Hash;
  touched: number;
  /** A request is writing to it (a second one at once would interleave bytes). */
  busy: boolean;
}

/** SQLite mode: each session appends to a temp file of this process. */
export class FileUploads implements UploadSessions {
  private readonly sessions = new Map<string, FileUpload>();
  private readonly dir: string;
  readonly quota: OrgQuota;

  constructor(
    dataDir: string,
    private readonly limits: UploadLimits,
    private readonly blobs: FileBlobStore,
  ) {
    this.quota = new OrgQuota(limits.maxOrgBytes, async (org) => (await blobs.stored(org)) + (await this.receiving(org)));
    // Each process its own directory: processes sharing a data directory never touch each other's files.
    const root = join(registryDir(dataDir), 'uploads');
    this.dir = join(root, randomUUID());
    mkdirSync(this.dir, { recursive: true });
    removeStale(root, this.dir);
  }

  async start(org: string, repository: string, principal: string): Promise<Upload> {
    await this.expire();
    let open = 0;
    for (const session of this.sessions.values()) if (session.principal === principal) open++;
    if (open >= this.limits.maxUploads) throw tooManyUploads(this.limits.maxUploads);
    const id = randomUUID();
    const upload: FileUpload = { id, org, repository, principal, file: join(this.dir, id), size: 0, hash: createHash('sha256'), touched: Date.now(), busy: false };
    writeFileSync(upload.file, '');
    this.sessions.set(id, upload);
    return upload;
  }

  async find(org: string, repository: string, id: string): Promise<Upload> {
    const upload = this.sessions.get(id);
    if (!upload || upload.org !== org || upload.repository !== repository) throw uploadUnknown();
    upload.touched = Date.now();
    return upload;
  }

  async append(session: Upload, body: Readable, expectedLength?: number): Promise<void> {
    const upload = session as FileUpload;
    if (upload.busy) throw uploadBusy();
    upload.busy = true;
    const before = upload.size;
    const hash = upload.hash.copy();
    let charge: Awaited<ReturnType<OrgQuota['open']>> | undefined;
    let committed = false;
    try {
      charge = await this.quota.open(upload.org);
      const stage = meter(before, this.limits.maxBlobBytes, hash, charge.charge);
      await receive(body, stage, expectedLength, createWriteStream(upload.file, { flags: 'r+', start: before }));
      upload.size = before + stage.received;
      upload.hash = hash;
      committed = true;
    } catch (err) {
      truncate(upload.file, before);
      throw err;
    } finally {
      charge?.close(committed);
      upload.busy = false;
      upload.touched = Date.now();
    }
  }

  async finish(session: Upload, claimed: string): Promise<void> {
    const upload = session as FileUpload;
    if (upload.busy) throw uploadBusy();
    this.sessions.delete(upload.id);
    const digest = `sha256:${upload.hash.digest('hex')}`;
    if (digest !== claimed) {
      rmSync(upload.file, { force: true });
      throw digestMismatch(digest, claimed);
    }
    await this.blobs.adopt(upload.org, upload.repository, digest, upload.size, upload.file);
  }

  async cancel(upload: Upload): Promise<void> {
    this.sessions.delete(upload.id);
    rmSync((upload as FileUpload).file, { force: true });
  }

  async expire(): Promise<void> {
    const before = Date.now() - this.limits.idleMs;
    for (const upload of this.sessions.values()) if (!upload.busy && upload.touched < before) await this.cancel(upload);
  }

  /** Bytes the org's sessions of this process hold. */
  private async receiving(org: string): Promise<number> {
    let bytes = 0;
    for (const upload of this.sessions.values()) if (upload.org === org) bytes += upload.size;
    return bytes;
  }

  async close(): Promise<void> {
    this.sessions.clear();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Another process's upload directory untouched for a day belongs to a process that died. */
function removeStale(root: string, own: string): void {
  const cutoff = Date.now() - 24 * 60 * 60 * 1000;
  for (const name of readdirSync(root)) {
    const dir = join(root, name);
    if (dir === own) continue;
    try {
      if (statSync(dir).mtimeMs < cutoff) rmSync(dir, { recursive: true, force: true });
    } catch {
      // gone meanwhile
    }
  }
}

function truncate(file: string, size: number): void {
  try {
    truncateSync(file, size);
  } catch {
    // the file is gone: the session was cancelled meanwhile
  }
}
