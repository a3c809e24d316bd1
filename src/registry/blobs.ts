// Where registry content lives: blobs (layers, configs and manifests alike) stored once per sha256
// digest, and the links that say which org holds which digest (an org reads only what was pushed
// into it). Two backends: files under the data directory beside SQLite, or chunked rows that
// every Keel process sharing a PostgreSQL database can serve.
import Database from 'better-sqlite3';
import { createReadStream, mkdirSync, renameSync, rmSync, statSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import pg from 'pg';
import { to as copyTo } from 'pg-copy-streams';
import { inTransaction } from '../store/postgres/statements.js';

/** What a link records: manifests carry their media type and, for the referrers API, their subject. */
export interface LinkInfo {
  mediaType: string;
  subject?: string;
  artifactType?: string;
}

export interface Linked extends LinkInfo {
  digest: string;
  size: number;
}

export interface BlobStore {
  /** The blob's size when the org holds it. */
  linked(org: string, digest: string): Promise<Linked | undefined>;
  /** Whether the content exists at all (in any org), for deduplication and cross-repository mounts. */
  exists(digest: string): Promise<boolean>;
  /** Moves a verified temp file in as the blob's content (kept if the digest is already stored) and links it to the org. */
  put(org: string, digest: string, size: number, file: string, info?: LinkInfo): Promise<void>;
  /** Links stored content to an org (a mount or a manifest naming it). */
  link(org: string, digest: string, info?: LinkInfo): Promise<void>;
  unlink(org: string, digest: string): Promise<void>;
  /** The content, from byte `start` through `end` (inclusive), streamed. */
  read(digest: string, start?: number, end?: number): Readable;
  /** Manifests of the org whose subject is `digest`. */
  referrers(org: string, digest: string): Promise<Linked[]>;
  /** Digests stored before `before` (ISO), for garbage collection. */
  candidates(before: string): Promise<string[]>;
  /** Removes the content and every link of a digest. */
  remove(digest: string): Promise<void>;
  close(): Promise<void>;
}

/** Where blob files and upload temp files live in the data directory. */
export const registryDir = (dataDir: string) => join(dataDir, 'registry');

const hexOf = (digest: string) => digest.slice('sha256:'.length);

/** SQLite mode: content as files named by digest; links in a small database of their own beside them. */
export class FileBlobStore implements BlobStore {
  private readonly db: Database.Database;
  private readonly root: string;

  constructor(dataDir: string) {
    this.root = join(registryDir(dataDir), 'blobs', 'sha256');
    mkdirSync(this.root, { recursive: true });
    this.db = new Database(join(registryDir(dataDir), 'registry.db'));
    this.db.pragma('journal_mode = WAL');
    this.db.pragma('busy_timeout = 5000');
    this.db.exec(`
      CREATE TABLE IF NOT EXISTS blobs (digest TEXT PRIMARY KEY, size INTEGER NOT NULL, created TEXT NOT NULL) WITHOUT ROWID;
      CREATE TABLE IF NOT EXISTS links (org TEXT NOT NULL, digest TEXT NOT NULL, media_type TEXT NOT NULL, subject TEXT, artifact_type TEXT, created TEXT NOT NULL, PRIMARY KEY (org, digest)) WITHOUT ROWID;
      CREATE INDEX IF NOT EXISTS links_by_subject ON links (org, subject) WHERE subject IS NOT NULL;
      CREATE INDEX IF NOT EXISTS links_by_digest ON links (digest);`);
  }

  private path(digest: string): string {
    const hex = hexOf(digest);
    return join(this.root, hex.slice(0, 2), hex);
  }

  async linked(org: string, digest: string): Promise<Linked | undefined> {
    const row = this.db.prepare('SELECT l.digest, b.size, l.media_type, l.subject, l.artifact_type FROM links l JOIN blobs b ON b.digest = l.digest WHERE l.org = ? AND l.digest = ?').get(org, digest) as LinkRow | undefined;
    return row && linkedOf(row);
  }

  async exists(digest: string): Promise<boolean> {
    return this.db.prepare('SELECT 1 FROM blobs WHERE digest = ?').get(digest) !== undefined;
  }

  async put(org: string, digest: string, size: number, file: string, info?: LinkInfo): Promise<void> {
    if (await this.exists(digest)) {
      rmSync(file, { force: true });
    } else {
      const target = this.path(digest);
      mkdirSync(join(target, '..'), { recursive: true });
      // The rename is atomic: the content is either wholly there under its digest or not at all.
      renameSync(file, target);
      this.db.prepare('INSERT OR IGNORE INTO blobs (digest, size, created) VALUES (?, ?, ?)').run(digest, size, new Date().toISOString());
    }
    await this.link(org, digest, info);
  }

  async link(org: string, digest: string, info?: LinkInfo): Promise<void> {
    this.db
      .prepare(
        `INSERT INTO links (org, digest, media_type, subject, artifact_type, created) VALUES (?, ?, ?, ?, ?, ?)
         ON CONFLICT (org, digest) DO UPDATE SET media_type = CASE WHEN excluded.media_type = '' THEN links.media_type ELSE excluded.media_type END,
           subject = COALESCE(excluded.subject, links.subject), artifact_type = COALESCE(excluded.artifact_type, links.artifact_type), created = excluded.created`,
      )
      .run(org, digest, info?.mediaType ?? '', info?.subject ?? null, info?.artifactType ?? null, new Date().toISOString());
    // Refreshing the blob's time keeps a just-linked blob out of the next collection's reach.
    this.db.prepare('UPDATE blobs SET created = ? WHERE digest = ?').run(new Date().toISOString(), digest);
  }

  async unlink(org: string, digest: string): Promise<void> {
    this.db.prepare('DELETE FROM links WHERE org = ? AND digest = ?').run(org, digest);
  }

  read(digest: string, start = 0, end?: number): Readable {
    return createReadStream(this.path(digest), { start, end });
  }

  async referrers(org: string, digest: string): Promise<Linked[]> {
    const rows = this.db.prepare('SELECT l.digest, b.size, l.media_type, l.subject, l.artifact_type FROM links l JOIN blobs b ON b.digest = l.digest WHERE l.org = ? AND l.subject = ? ORDER BY l.digest').all(org, digest) as LinkRow[];
    return rows.map(linkedOf);
  }

  async candidates(before: string): Promise<string[]> {
    return (this.db.prepare('SELECT digest FROM blobs WHERE created < ?').all(before) as Array<{ digest: string }>).map((r) => r.digest);
  }

  async remove(digest: string): Promise<void> {
    this.db.transaction(() => {
      this.db.prepare('DELETE FROM links WHERE digest = ?').run(digest);
      this.db.prepare('DELETE FROM blobs WHERE digest = ?').run(digest);
    })();
    rmSync(this.path(digest), { force: true });
  }

  async close(): Promise<void> {
    this.db.close();
  }
}

/** Rows of this size: a read holds one at a time, so memory stays bounded whatever the blob's size. */
export const CHUNK_BYTES = 1024 * 1024;
/** Chunks per COPY while streaming a blob out: a slow reader holds a pooled connection for one such batch at most. */
const CHUNKS_PER_COPY = 8;

/** PostgreSQL mode: content as numbered bytea chunks, so any process on the database serves any blob. */
export class PostgresBlobStore implements BlobStore {
  private ready: Promise<void>;

  constructor(private readonly pool: pg.Pool) {
    pool.on('error', () => {});
    this.ready = this.migrate();
  }

  private async migrate(): Promise<void> {
    // Under an advisory lock: processes starting together would otherwise race on CREATE TABLE.
    await inTransaction(this.pool, async (client) => {
      await client.query('SELECT pg_advisory_xact_lock($1)', [REGISTRY_MIGRATION_LOCK]);
      await client.query(`
        CREATE TABLE IF NOT EXISTS registry_blobs (digest TEXT PRIMARY KEY, size BIGINT NOT NULL, created TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS registry_chunks (digest TEXT NOT NULL, seq INTEGER NOT NULL, data BYTEA NOT NULL, PRIMARY KEY (digest, seq));
        -- Layers are compressed already: PostgreSQL trying again only costs time on every write and read.
        ALTER TABLE registry_chunks ALTER COLUMN data SET STORAGE EXTERNAL;
        CREATE TABLE IF NOT EXISTS registry_links (org TEXT NOT NULL, digest TEXT NOT NULL, media_type TEXT NOT NULL, subject TEXT, artifact_type TEXT, created TEXT NOT NULL, PRIMARY KEY (org, digest));
        CREATE INDEX IF NOT EXISTS registry_links_by_subject ON registry_links (org, subject) WHERE subject IS NOT NULL;
        CREATE INDEX IF NOT EXISTS registry_links_by_digest ON registry_links (digest);`);
    });
  }

  private async query<R extends pg.QueryResultRow>(sql: string, params: unknown[]): Promise<R[]> {
    await this.ready;
    return (await this.pool.query<R>(sql, params)).rows;
  }

  async linked(org: string, digest: string): Promise<Linked | undefined> {
    const [row] = await this.query<LinkRow>('SELECT l.digest, b.size, l.media_type, l.subject, l.artifact_type FROM registry_links l JOIN registry_blobs b ON b.digest = l.digest WHERE l.org = $1 AND l.digest = $2', [org, digest]);
    return row && linkedOf(row);
  }

  async exists(digest: string): Promise<boolean> {
    return (await this.query('SELECT 1 FROM registry_blobs WHERE digest = $1', [digest])).length > 0;
  }

  async put(org: string, digest: string, size: number, file: string, info?: LinkInfo): Promise<void> {
    await this.ready;
    try {
      await inTransaction(this.pool, async (client) => {
        // A concurrent push of the same content waits here on the key, then finds it stored.
        const inserted = await client.query('INSERT INTO registry_blobs (digest, size, created) VALUES ($1, $2, $3) ON CONFLICT (digest) DO NOTHING RETURNING digest', [digest, size, new Date().toISOString()]);
        if (inserted.rowCount) {
          // The WAL is flushed by the commit of any later write (the manifest that names this blob):
          // not waiting for it here costs no durability that a client relies on.
          await client.query('SET LOCAL synchronous_commit = off');
          const handle = await open(file, 'r');
          try {
            // One chunk per statement: a push holds one chunk (and its encoding) per layer in flight.
            const buffer = Buffer.allocUnsafe(CHUNK_BYTES);
            for (let seq = 0; ; seq++) {
              const { bytesRead } = await handle.read(buffer, 0, CHUNK_BYTES, null);
              if (bytesRead === 0 && seq > 0) break;
              await client.query('INSERT INTO registry_chunks (digest, seq, data) VALUES ($1, $2, $3)', [digest, seq, buffer.subarray(0, bytesRead)]);
              if (bytesRead < CHUNK_BYTES) break;
            }
          } finally {
            await handle.close();
          }
        }
        await client.query(LINK_SQL, linkParams(org, digest, info));
      });
    } finally {
      rmSync(file, { force: true });
    }
  }

  async link(org: string, digest: string, info?: LinkInfo): Promise<void> {
    await this.query(LINK_SQL, linkParams(org, digest, info));
    await this.query('UPDATE registry_blobs SET created = $2 WHERE digest = $1', [digest, new Date().toISOString()]);
  }

  async unlink(org: string, digest: string): Promise<void> {
    await this.query('DELETE FROM registry_links WHERE org = $1 AND digest = $2', [org, digest]);
  }

  read(digest: string, start = 0, end?: number): Readable {
    const pool = this.pool;
    const ready = this.ready;
    return Readable.from(
      (async function* () {
        await ready;
        const [blob] = (await pool.query<{ size: string }>('SELECT size FROM registry_blobs WHERE digest = $1', [digest])).rows;
        if (!blob) throw new Error(`blob ${digest} is gone`);
        const last = Math.min(end ?? Number(blob.size) - 1, Number(blob.size) - 1);
        const lastSeq = Math.floor(last / CHUNK_BYTES);
        for (let from = Math.floor(start / CHUNK_BYTES); from <= lastSeq; from += CHUNKS_PER_COPY) {
          const upto = Math.min(from + CHUNKS_PER_COPY, lastSeq + 1);
          const client = await pool.connect();
          let finished = false;
          try {
            // COPY in binary format hands over the bytes as stored; a query would return bytea as hex text.
            const copy = client.query(copyTo(`COPY (SELECT seq, data FROM registry_chunks WHERE digest = ${client.escapeLiteral(digest)} AND seq >= ${from} AND seq < ${upto} ORDER BY seq) TO STDOUT (FORMAT binary)`));
            let seq = from;
            let offset = 0;
            for await (const item of copiedChunks(copy)) {
              if (typeof item === 'number') {
                if (item !== seq) throw new Error(`blob ${digest} is missing chunk ${seq}`);
                offset = seq++ * CHUNK_BYTES;
                continue;
              }
              const low = Math.max(start, offset);
              const high = Math.min(last + 1, offset + item.length);
              if (high > low) yield item.subarray(low - offset, high - offset);
              offset += item.length;
            }
            if (seq !== upto) throw new Error(`blob ${digest} is missing chunk ${seq}`);
            finished = true;
          } finally {
            // A reader gone mid-COPY leaves the connection in the middle of it: it cannot serve anyone else.
            client.release(!finished);
          }
        }
      })(),
      { objectMode: false },
    );
  }

  async referrers(org: string, digest: string): Promise<Linked[]> {
    const rows = await this.query<LinkRow>('SELECT l.digest, b.size, l.media_type, l.subject, l.artifact_type FROM registry_links l JOIN registry_blobs b ON b.digest = l.digest WHERE l.org = $1 AND l.subject = $2 ORDER BY l.digest', [org, digest]);
    return rows.map(linkedOf);
  }

  async candidates(before: string): Promise<string[]> {
    return (await this.query<{ digest: string }>('SELECT digest FROM registry_blobs WHERE created < $1', [before])).map((r) => r.digest);
  }

  async remove(digest: string): Promise<void> {
    await this.ready;
    await inTransaction(this.pool, async (client) => {
      await client.query('DELETE FROM registry_links WHERE digest = $1', [digest]);
      await client.query('DELETE FROM registry_chunks WHERE digest = $1', [digest]);
      await client.query('DELETE FROM registry_blobs WHERE digest = $1', [digest]);
    });
  }

  async close(): Promise<void> {
    await this.ready.catch(() => {});
    await this.pool.end();
  }
}

const REGISTRY_MIGRATION_LOCK = 0x6b726567; // 'kreg'

const LINK_SQL = `INSERT INTO registry_links (org, digest, media_type, subject, artifact_type, created) VALUES ($1, $2, $3, $4, $5, $6)
  ON CONFLICT (org, digest) DO UPDATE SET media_type = CASE WHEN excluded.media_type = '' THEN registry_links.media_type ELSE excluded.media_type END,
    subject = COALESCE(excluded.subject, registry_links.subject), artifact_type = COALESCE(excluded.artifact_type, registry_links.artifact_type), created = excluded.created`;

const linkParams = (org: string, digest: string, info?: LinkInfo) => [org, digest, info?.mediaType ?? '', info?.subject ?? null, info?.artifactType ?? null, new Date().toISOString()];

interface LinkRow {
  digest: string;
  size: number | string;
  media_type: string;
  subject: string | null;
  artifact_type: string | null;
}

function linkedOf(row: LinkRow): Linked {
  return { digest: row.digest, size: Number(row.size), mediaType: row.media_type, subject: row.subject ?? undefined, artifactType: row.artifact_type ?? undefined };
}

const COPY_SIGNATURE = Buffer.from('PGCOPY\n\xff\r\n\0', 'latin1');
const COPY_HEADER_BYTES = COPY_SIGNATURE.length + 8;
/** A row's field count, the seq field's length and value, and the data field's length. */
const ROW_HEADER_BYTES = 2 + 4 + 4 + 4;

/**
 * Parses `COPY (SELECT seq, data …) TO STDOUT (FORMAT binary)` output as it arrives: yields each
 * row's seq, then its data in the pieces the connection delivered (nothing is copied or buffered whole).
 */
async function* copiedChunks(source: AsyncIterable<Buffer>): AsyncGenerator<number | Buffer> {
  let pending = Buffer.alloc(0);
  let want = COPY_HEADER_BYTES;
  let dataLeft = 0;
  let header = true;
  let ended = false;
  for await (let piece of source as AsyncIterable<Buffer>) {
    while (piece.length > 0 && !ended) {
      if (dataLeft > 0) {
        const n = Math.min(dataLeft, piece.length);
        yield piece.subarray(0, n);
        piece = piece.subarray(n);
        dataLeft -= n;
        continue;
      }
      const n = Math.min(want - pending.length, piece.length);
      pending = Buffer.concat([pending, piece.subarray(0, n)]);
      piece = piece.subarray(n);
      if (!header && pending.length >= 2 && pending.readInt16BE(0) === -1) {
        ended = true;
      } else if (pending.length === want) {
        if (header) {
          if (!pending.subarray(0, COPY_SIGNATURE.length).equals(COPY_SIGNATURE) || pending.readUInt32BE(COPY_SIGNATURE.length + 4) !== 0) throw new Error('unexpected COPY header');
          header = false;
          want = ROW_HEADER_BYTES;
        } else {
          if (pending.readInt16BE(0) !== 2 || pending.readInt32BE(2) !== 4) throw new Error('unexpected COPY row');
          yield pending.readInt32BE(6);
          dataLeft = pending.readInt32BE(10);
        }
        pending = Buffer.alloc(0);
      }
    }
  }
  if (!ended) throw new Error('COPY output ended early');
}

/** The backend that goes with the store: chunked rows on PostgreSQL, files beside SQLite. */
export function openBlobStore(options: { databaseUrl?: string; dataDir: string }): BlobStore {
  if (options.databaseUrl && /^postgres(ql)?:\/\//.test(options.databaseUrl)) return new PostgresBlobStore(new pg.Pool({ connectionString: options.databaseUrl, max: 4 }));
  return new FileBlobStore(options.dataDir);
}

/** Size of a file, or undefined when it is not there. */
export function sizeOf(file: string): number | undefined {
  try {
    return statSync(file).size;
  } catch {
    return undefined;
  }
}
