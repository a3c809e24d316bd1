// Where registry content lives: blobs (layers, configs and manifests alike) stored once per sha256
// digest, and the links that say which org holds which digest (an org reads only what was pushed
// into it). Two backends: files under the data directory beside SQLite, or chunked rows that
// every Keel process sharing a PostgreSQL database can serve (postgres.ts).
import Database from 'better-sqlite3';
import { randomUUID } from 'node:crypto';
import { createReadStream, mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Readable } from 'node:stream';

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
  /** Stores small verified content (a manifest) under its digest, unless it is stored already, and links it to the org. */
  put(org: string, digest: string, content: Buffer, info?: LinkInfo): Promise<void>;
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

  async put(org: string, digest: string, content: Buffer, info?: LinkInfo): Promise<void> {
    const file = `${this.path(digest)}.${randomUUID()}`;
    mkdirSync(join(file, '..'), { recursive: true });
    writeFileSync(file, content);
    await this.adopt(org, digest, content.length, file, info);
  }

  /** Moves a verified temp file in as the blob's content (dropped if the digest is already stored) and links it to the org. */
  async adopt(org: string, digest: string, size: number, file: string, info?: LinkInfo): Promise<void> {
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

export interface LinkRow {
  digest: string;
  size: number | string;
  media_type: string;
  subject: string | null;
  artifact_type: string | null;
}

export function linkedOf(row: LinkRow): Linked {
  return { digest: row.digest, size: Number(row.size), mediaType: row.media_type, subject: row.subject ?? undefined, artifactType: row.artifact_type ?? undefined };
}
