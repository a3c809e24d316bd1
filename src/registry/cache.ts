// A local copy of PostgreSQL registry content, for this process: content never changes under its
// digest, so bytes this process received or read once can be served again from a file instead of
// crossing from PostgreSQL a second time. Only content whose full length arrived and whose sha256
// was checked is renamed into place; anything being written is a temp file, never served.
// Which org may read what is decided in PostgreSQL before any read: the cache only holds bytes.
import { createHash, randomUUID, type Hash } from 'node:crypto';
import { createReadStream, mkdirSync, readdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { Transform, type Readable } from 'node:stream';
import { registryDir } from './blobs.js';

/** Reads from a cached file in pieces this size: what the PostgreSQL path hands over too. */
const FILE_PIECE_BYTES = 256 * 1024;

export class BlobCache {
  private readonly root: string;
  private readonly tmp: string;
  /** Cached digests and their sizes, least recently used first (a Map keeps insertion order). */
  private readonly entries = new Map<string, number>();
  private total = 0;

  constructor(
    dataDir: string,
    private readonly maxBytes: number,
  ) {
    const dir = join(registryDir(dataDir), 'cache');
    this.root = join(dir, 'sha256');
    // Each process its own temp directory, by process id: another process on the same data
    // directory (`keel registry gc`) keeps its writes, and those of a process that ended are dropped.
    const temps = join(dir, 'tmp');
    this.tmp = join(temps, String(process.pid));
    mkdirSync(temps, { recursive: true });
    for (const name of readdirSync(temps)) if (name === String(process.pid) || !alive(Number(name))) rmSync(join(temps, name), { recursive: true, force: true });
    mkdirSync(this.tmp, { recursive: true });
    mkdirSync(this.root, { recursive: true });
    // Files from an earlier run: each is checked against the size PostgreSQL records before it is served.
    const found: Array<{ digest: string; size: number; used: number }> = [];
    for (const prefix of readdirSync(this.root)) {
      for (const hex of readdirSync(join(this.root, prefix))) {
        try {
          const stat = statSync(join(this.root, prefix, hex));
          found.push({ digest: `sha256:${hex}`, size: stat.size, used: stat.mtimeMs });
        } catch {
          // gone meanwhile
        }
      }
    }
    for (const { digest, size } of found.sort((a, b) => a.used - b.used)) this.add(digest, size);
  }

  private path(digest: string): string {
    const hex = digest.slice('sha256:'.length);
    return join(this.root, hex.slice(0, 2), hex);
  }

  /** A temp file for content on its way in. */
  tempFile(): string {
    return join(this.tmp, randomUUID());
  }

  /**
   * The cached content's bytes `start` through `last` when the file holds `size` bytes, the
   * blob's size in PostgreSQL; a file of any other length (cut short, overwritten) is dropped.
   */
  async open(digest: string, size: number, start: number, last: number): Promise<Readable | undefined> {
    if (!this.entries.has(digest)) return undefined;
    let handle: FileHandle;
    try {
      handle = await open(this.path(digest), 'r');
    } catch {
      this.forget(digest);
      return undefined;
    }
    const actual = (await handle.stat()).size;
    if (actual !== size) {
      await handle.close();
      this.drop(digest);
      return undefined;
    }
    this.touch(digest, size);
    return createReadStream('', { fd: handle, start, end: last, highWaterMark: FILE_PIECE_BYTES });
  }

  /**
   * Moves a temp file holding `digest`'s verified content of `size` bytes into place (or drops
   * it when it is no such file or larger than the cache may hold).
   */
  adopt(file: string, digest: string, size: number): void {
    try {
      if (size > this.maxBytes || statSync(file).size !== size) return void rmSync(file, { force: true });
      const target = this.path(digest);
      mkdirSync(join(target, '..'), { recursive: true });
      // Atomic: readers see the whole content under its digest or nothing.
      renameSync(file, target);
      this.add(digest, size);
    } catch {
      rmSync(file, { force: true });
    }
  }

  /** Collects a whole read of `digest` (`size` bytes) as it streams: it is cached once all of it arrived with the right sha256. */
  filler(digest: string, size: number): CacheFiller | undefined {
    if (size > this.maxBytes || this.entries.has(digest)) return undefined;
    return new CacheFiller(this, digest, size);
  }

  /** Removes the content's file: its blob is gone. */
  drop(digest: string): void {
    this.forget(digest);
    rmSync(this.path(digest), { force: true });
  }

  private forget(digest: string): void {
    const size = this.entries.get(digest);
    if (size === undefined) return;
    this.entries.delete(digest);
    this.total -= size;
  }

  private touch(digest: string, size: number): void {
    this.entries.delete(digest);
    this.entries.set(digest, size);
  }

  private add(digest: string, size: number): void {
    this.forget(digest);
    this.entries.set(digest, size);
    this.total += size;
    // Least recently used out first, until what stays fits (the newcomer last of all).
    for (const [old] of this.entries) {
      if (this.total <= this.maxBytes) break;
      this.drop(old);
    }
  }
}

function alive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: a process of another user has that id.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Bytes of one whole read, written to a temp file while they go to the client. */
export class CacheFiller {
  private readonly file: string;
  private handle?: Promise<FileHandle>;
  private pending: Promise<unknown> = Promise.resolve();
  private readonly hash: Hash = createHash('sha256');
  private written = 0;
  private failed = false;

  constructor(
    private readonly cache: BlobCache,
    private readonly digest: string,
    private readonly size: number,
  ) {
    this.file = cache.tempFile();
  }

  /**
   * Starts writing a piece once the previous one is written: the piece goes to the client
   * meanwhile, and a disk slower than the client holds up the next piece rather than queueing them.
   */
  async write(piece: Buffer): Promise<void> {
    await this.pending;
    if (this.failed) return;
    this.hash.update(piece);
    const at = this.written;
    this.written += piece.length;
    const handle = (this.handle ??= open(this.file, 'w'));
    this.pending = handle.then((h) => h.write(piece, 0, piece.length, at)).catch(() => (this.failed = true));
  }

  /** All bytes arrived: the file goes into place when their length and sha256 are the blob's. */
  async commit(): Promise<void> {
    await this.pending;
    const ok = !this.failed && this.written === this.size && `sha256:${this.hash.digest('hex')}` === this.digest;
    const handle = await this.handle?.catch(() => undefined);
    await handle?.close().catch(() => {});
    if (ok && handle) this.cache.adopt(this.file, this.digest, this.size);
    else rmSync(this.file, { force: true });
  }

  async abort(): Promise<void> {
    this.failed = true;
    await this.pending;
    await (await this.handle?.catch(() => undefined))?.close().catch(() => {});
    rmSync(this.file, { force: true });
  }
}

/**
 * A copy of an upload's bytes as they stream to PostgreSQL, passed on unchanged. A failure to
 * write the copy only loses the copy (`failed`), never the upload. A piece is passed on once the
 * one before it is on disk, so a disk slower than the upload slows the upload instead of
 * queueing it in memory.
 */
export function teeTo(handle: FileHandle, at: number): Transform & { failed: boolean; flushed: Promise<unknown> } {
  let position = at;
  const tee = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      const from = position;
      position += chunk.length;
      const previous = tee.flushed;
      tee.flushed = previous.then(() => handle.write(chunk, 0, chunk.length, from)).catch(() => (tee.failed = true));
      void previous.then(() => done(null, chunk));
    },
  }) as Transform & { failed: boolean; flushed: Promise<unknown> };
  tee.failed = false;
  tee.flushed = Promise.resolve();
  return tee;
}
