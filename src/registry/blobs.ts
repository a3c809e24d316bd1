// Where registry content lives: blobs (layers, configs and manifests alike) stored once per sha256
// digest, the links that say which org holds which digest, and the repository links that say which
// repository of the org holds it (a repository serves only what was pushed or mounted into it, or
// what its manifests name: knowing a digest reads nothing). Two backends: files under the data directory beside SQLite, or chunked rows that
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
  /** A referrer's annotations, for the referrers index (null: it has none). */
  annotations?: Record<string, unknown> | null;
}

export interface Linked extends LinkInfo {
  digest: string;
  size: number;
}

/** A link's annotations as stored: JSON text (`null` for none); NULL when not recorded (a link older than the column). */
export const annotationsText = (info?: LinkInfo) => (info?.annotations === undefined ? null : JSON.stringify(info.annotations));

export interface BlobStore {
  /** The blob's size when the org holds it (in any of its repositories). */
  linked(org: string, digest: string): Promise<Linked | undefined>;
  /** The blob's size when the repository holds it. */
  held(org: string, repository: string, digest: string): Promise<Linked | undefined>;
  /** Whether the content exists at all (in any org), for deduplication. */
  exists(digest: string): Promise<boolean>;
  /** Stores small verified content (a manifest) under its digest, unless it is stored already, and links it to the org's repository. */
  put(org: string, repository: string, digest: string, content: Buffer, info?: LinkInfo): Promise<void>;
  /** Links stored content to the org's repository (a mount). */
  link(org: string, repository: string, digest: string, info?: LinkInfo): Promise<void>;
  /** Records that the repository holds content its org links already (what its existing manifests name). */
  hold(org: string, repository: string, digest: string): Promise<void>;
  /** Removes the repository's reference; the org's link goes with the last repository of the org holding it. */
  unlink(org: string, repository: string, digest: string): Promise<void>;
  /** Whether the org links content no repository of it holds (linked before repositories were recorded). */
  unassigned(): Promise<boolean>;
  /** Drops the org links no repository holds (once the repositories' links are derived from their manifests). */
  forgetUnassigned(): Promise<void>;
  /** The content, from byte `start` through `end` (inclusive), streamed. */
  read(digest: string, start?: number, end?: number): Readable;
  /** Manifests of the org (of the repository, when named) whose subject is `digest`. */
  referrers(org: string, digest: string, repository?: string): Promise<Linked[]>;
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
      CREATE INDEX IF NOT EXISTS links_by_digest ON links (digest);
      CREATE TABLE IF NOT EXISTS repository_links (org TEXT NOT NULL, repository TEXT NOT NULL, digest TEXT NOT NULL, created TEXT NOT NULL, PRIMARY KEY (org, repository, digest)) WITHOUT ROWID;
      CREATE INDEX IF NOT EXISTS repository_links_by_digest ON repository_links (org, digest);`);
    if (!(this.db.prepare('PRAGMA table_info(links)').all() as Array<{ name: string }>).some((c) => c.name === 'annotations')) this.db.exec('ALTER TABLE links ADD COLUMN annotations TEXT');
    // What each org links, kept as links come and go (the quota reads it on every chunk); counted from the links once.
    this.db.transaction(() => {
      if (this.db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'org_bytes'").get()) return;
      this.db.exec(`
        CREATE TABLE org_bytes (org TEXT PRIMARY KEY, bytes INTEGER NOT NULL) WITHOUT ROWID;
        INSERT INTO org_bytes (org, bytes) SELECT l.org, sum(b.size) FROM links l JOIN blobs b ON b.digest = l.digest GROUP BY l.org;`);
    }).immediate();
  }

  private path(digest: string): string {
    const hex = hexOf(digest);
    return join(this.root, hex.slice(0, 2), hex);
  }

  async linked(org: string, digest: string): Promise<Linked | undefined> {
    const row = this.db.prepare('SELECT l.digest, b.size, l.media_type, l.subject, l.artifact_type FROM links l JOIN blobs b ON b.digest = l.digest WHERE l.org = ? AND l.digest = ?').get(org, digest) as LinkRow | undefined;
    return row && linkedOf(row);
  }

  async held(org: string, repository: string, digest: string): Promise<Linked | undefined> {
    const row = this.db
      .prepare('SELECT l.digest, b.size, l.media_type, l.subject, l.artifact_type FROM repository_links r JOIN links l ON l.org = r.org AND l.digest = r.digest JOIN blobs b ON b.digest = r.digest WHERE r.org = ? AND r.repository = ? AND r.digest = ?')
      .get(org, repository, digest) as LinkRow | undefined;
    return row && linkedOf(row);
  }

  async exists(digest: string): Promise<boolean> {
    return this.db.prepare('SELECT 1 FROM blobs WHERE digest = ?').get(digest) !== undefined;
  }

  async put(org: string, repository: string, digest: string, content: Buffer, info?: LinkInfo): Promise<void> {
    const file = `${this.path(digest)}.${randomUUID()}`;
    mkdirSync(join(file, '..'), { recursive: true });
    writeFileSync(file, content);
    await this.adopt(org, repository, digest, content.length, file, info);
  }

  /** Moves a verified temp file in as the blob's content (dropped if the digest is already stored) and links it to the org's repository. */
  async adopt(org: string, repository: string, digest: string, size: number, file: string, info?: LinkInfo): Promise<void> {
    if (await this.exists(digest)) {
      rmSync(file, { force: true });
    } else {
      const target = this.path(digest);
      mkdirSync(join(target, '..'), { recursive: true });
      // The rename is atomic: the content is either wholly there under its digest or not at all.
      renameSync(file, target);
      this.db.prepare('INSERT OR IGNORE INTO blobs (digest, size, created) VALUES (?, ?, ?)').run(digest, size, new Date().toISOString());
    }
    await this.link(org, repository, digest, info);
  }

  async link(org: string, repository: string, digest: string, info?: LinkInfo): Promise<void> {
    const now = new Date().toISOString();
    this.db.transaction(() => {
      const fresh = this.db.prepare('SELECT 1 FROM links WHERE org = ? AND digest = ?').get(org, digest) === undefined;
      this.db
        .prepare(
        `INSERT INTO links (org, digest, media_type, subject, artifact_type, annotations, created) VALUES (?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (org, digest) DO UPDATE SET media_type = CASE WHEN excluded.media_type = '' THEN links.media_type ELSE excluded.media_type END,
           subject = COALESCE(excluded.subject, links.subject), artifact_type = COALESCE(excluded.artifact_type, links.artifact_type),
           annotations = COALESCE(excluded.annotations, links.annotations), created = excluded.created`,
      )
        .run(org, digest, info?.mediaType ?? '', info?.subject ?? null, info?.artifactType ?? null, annotationsText(info), now);
      this.db.prepare('INSERT OR IGNORE INTO repository_links (org, repository, digest, created) VALUES (?, ?, ?, ?)').run(org, repository, digest, now);
      if (fresh) this.db.prepare('INSERT INTO org_bytes (org, bytes) SELECT ?, size FROM blobs WHERE digest = ? ON CONFLICT (org) DO UPDATE SET bytes = bytes + excluded.bytes').run(org, digest);
      // Refreshing the blob's time keeps a just-linked blob out of the next collection's reach.
      this.db.prepare('UPDATE blobs SET created = ? WHERE digest = ?').run(now, digest);
    })();
  }

  async hold(org: string, repository: string, digest: string): Promise<void> {
    this.db.prepare('INSERT OR IGNORE INTO repository_links (org, repository, digest, created) SELECT org, ?, digest, ? FROM links WHERE org = ? AND digest = ?').run(repository, new Date().toISOString(), org, digest);
  }

  async unlink(org: string, repository: string, digest: string): Promise<void> {
    this.db.transaction(() => {
      this.db.prepare('DELETE FROM repository_links WHERE org = ? AND repository = ? AND digest = ?').run(org, repository, digest);
      const gone = this.db.prepare('DELETE FROM links WHERE org = ? AND digest = ? AND NOT EXISTS (SELECT 1 FROM repository_links WHERE org = ? AND digest = ?)').run(org, digest, org, digest).changes;
      if (gone) this.db.prepare('UPDATE org_bytes SET bytes = bytes - (SELECT size FROM blobs WHERE digest = ?) WHERE org = ?').run(digest, org);
    })();
  }

  /** Bytes of the distinct content the org links. */
  async stored(org: string): Promise<number> {
    return Number((this.db.prepare('SELECT bytes FROM org_bytes WHERE org = ?').get(org) as { bytes: number } | undefined)?.bytes ?? 0);
  }

  async unassigned(): Promise<boolean> {
    return this.db.prepare(`SELECT 1 FROM links WHERE ${UNASSIGNED} LIMIT 1`).get() !== undefined;
  }

  async forgetUnassigned(): Promise<void> {
    this.db.transaction(() => {
      this.db.prepare(`UPDATE org_bytes SET bytes = bytes - (SELECT coalesce(sum(b.size), 0) FROM links JOIN blobs b ON b.digest = links.digest WHERE links.org = org_bytes.org AND ${UNASSIGNED})`).run();
      this.db.prepare(`DELETE FROM links WHERE ${UNASSIGNED}`).run();
    })();
  }

  read(digest: string, start = 0, end?: number): Readable {
    return createReadStream(this.path(digest), { start, end });
  }

  async referrers(org: string, digest: string, repository?: string): Promise<Linked[]> {
    const inRepository = repository === undefined ? '' : ' AND EXISTS (SELECT 1 FROM repository_links r WHERE r.org = l.org AND r.digest = l.digest AND r.repository = ?)';
    const rows = this.db
      .prepare(`SELECT l.digest, b.size, l.media_type, l.subject, l.artifact_type, l.annotations FROM links l JOIN blobs b ON b.digest = l.digest WHERE l.org = ? AND l.subject = ?${inRepository} ORDER BY l.digest`)
      .all(org, digest, ...(repository === undefined ? [] : [repository])) as LinkRow[];
    return rows.map(linkedOf);
  }

  async candidates(before: string): Promise<string[]> {
    return (this.db.prepare('SELECT digest FROM blobs WHERE created < ?').all(before) as Array<{ digest: string }>).map((r) => r.digest);
  }

  async remove(digest: string): Promise<void> {
    this.db.transaction(() => {
      this.db.prepare('DELETE FROM repository_links WHERE digest = ?').run(digest);
      this.db.prepare('UPDATE org_bytes SET bytes = bytes - (SELECT size FROM blobs WHERE digest = ?) WHERE org IN (SELECT org FROM links WHERE digest = ?)').run(digest, digest);
      this.db.prepare('DELETE FROM links WHERE digest = ?').run(digest);
      this.db.prepare('DELETE FROM blobs WHERE digest = ?').run(digest);
    })();
    rmSync(this.path(digest), { force: true });
  }

  async close(): Promise<void> {
    this.db.close();
  }
}

/** An org link no repository of the org holds. */
const UNASSIGNED = 'NOT EXISTS (SELECT 1 FROM repository_links r WHERE r.org = links.org AND r.digest = links.digest)';

export interface LinkRow {
  digest: string;
  size: number | string;
  media_type: string;
  subject: string | null;
  artifact_type: string | null;
  annotations?: string | null;
}

/** A blob read whole into memory (a manifest: callers bound its size first). */
export async function readWhole(blobs: BlobStore, digest: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of blobs.read(digest)) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

export function linkedOf(row: LinkRow): Linked {
  return {
    digest: row.digest,
    size: Number(row.size),
    mediaType: row.media_type,
    subject: row.subject ?? undefined,
    artifactType: row.artifact_type ?? undefined,
    ...(row.annotations == null ? {} : { annotations: JSON.parse(row.annotations) as Record<string, unknown> | null }),
  };
}
