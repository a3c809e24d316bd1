// Blob uploads in progress: each session appends to a temp file of this process while hashing it,
// so nothing of an unfinished or unverified upload is ever visible as a blob.
import { createHash, randomUUID, type Hash } from 'node:crypto';
import { createWriteStream, mkdirSync, readdirSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { registryDir } from './blobs.js';
import { RegistryError } from './errors.js';

export interface Upload {
  id: string;
  org: string;
  repository: string;
  file: string;
  /** Bytes received so far. */
  size: number;
  /** The hash of those bytes (kept as they arrive, so finishing needs no second read). */
  hash: Hash;
  /** Last time a request touched the session. */
  touched: number;
  /** A request is writing to it (a second one at once would interleave bytes). */
  busy: boolean;
}

/** Sessions untouched this long are dropped with their files. */
const ABANDONED_MS = 60 * 60 * 1000;

export class Uploads {
  private readonly sessions = new Map<string, Upload>();
  readonly dir: string;
  private readonly sweeper: NodeJS.Timeout;

  constructor(dataDir: string, private readonly maxBlobBytes: number) {
    // Each process its own directory: processes sharing a data directory never touch each other's files.
    const root = join(registryDir(dataDir), 'uploads');
    this.dir = join(root, randomUUID());
    mkdirSync(this.dir, { recursive: true });
    removeStale(root, this.dir);
    this.sweeper = setInterval(() => this.sweep(), 60_000);
    this.sweeper.unref();
  }

  start(org: string, repository: string): Upload {
    const id = randomUUID();
    const upload: Upload = { id, org, repository, file: join(this.dir, id), size: 0, hash: createHash('sha256'), touched: Date.now(), busy: false };
    writeFileSync(upload.file, '');
    this.sessions.set(id, upload);
    return upload;
  }

  /** The session, if it belongs to this org and repository. */
  find(org: string, repository: string, id: string): Upload {
    const upload = this.sessions.get(id);
    if (!upload || upload.org !== org || upload.repository !== repository) throw new RegistryError('BLOB_UPLOAD_UNKNOWN', 'blob upload unknown to registry', 404);
    upload.touched = Date.now();
    return upload;
  }

  /**
   * Appends a request body to the session. A body cut short (the client disconnected) leaves the
   * session as it was before this request: the partial bytes are cut off the file again.
   */
  async append(upload: Upload, body: Readable, expectedLength?: number): Promise<void> {
    if (upload.busy) throw new RegistryError('BLOB_UPLOAD_INVALID', 'another request is writing to this upload', 416);
    upload.busy = true;
    const before = upload.size;
    const hash = upload.hash.copy();
    let received = 0;
    const limit = this.maxBlobBytes;
    try {
      await pipeline(
        body,
        new Transform({
          transform(chunk: Buffer, _encoding, done) {
            received += chunk.length;
            if (before + received > limit) return done(new RegistryError('SIZE_INVALID', `the blob is larger than the registry accepts (${limit} bytes, KEEL_REGISTRY_MAX_BLOB_BYTES)`, 413));
            hash.update(chunk);
            done(null, chunk);
          },
        }),
        createWriteStream(upload.file, { flags: 'r+', start: before }),
      );
      if (expectedLength !== undefined && received !== expectedLength) {
        throw new RegistryError('SIZE_INVALID', `received ${received} bytes, but Content-Length said ${expectedLength}`, 400);
      }
      upload.size = before + received;
      upload.hash = hash;
    } catch (err) {
      truncate(upload.file, before);
      // A client gone mid-body is the client's failure, not the server's.
      const cutShort = !(err instanceof RegistryError) && (body as { complete?: boolean }).complete === false;
      throw cutShort ? new RegistryError('BLOB_UPLOAD_INVALID', 'the upload was cut short', 400) : err;
    } finally {
      upload.busy = false;
      upload.touched = Date.now();
    }
  }

  /** Ends the session: its file is the caller's (to move into the blob store) and its digest is returned. */
  finish(upload: Upload): { file: string; digest: string; size: number } {
    this.sessions.delete(upload.id);
    return { file: upload.file, digest: `sha256:${upload.hash.digest('hex')}`, size: upload.size };
  }

  cancel(upload: Upload): void {
    this.sessions.delete(upload.id);
    rmSync(upload.file, { force: true });
  }

  private sweep(): void {
    const cutoff = Date.now() - ABANDONED_MS;
    for (const upload of this.sessions.values()) if (!upload.busy && upload.touched < cutoff) this.cancel(upload);
  }

  close(): void {
    clearInterval(this.sweeper);
    this.sessions.clear();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Another process's upload directory untouched for a day belongs to a process that died. */
function removeStale(root: string, own: string): void {
  const cutoff = Date.now() - 24 * ABANDONED_MS;
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
