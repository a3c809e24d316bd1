// Registry content in PostgreSQL, where every Keel process sharing the database serves it and
// continues its uploads. Content is rows of bytes under a number (`registry_content`); an upload
// session owns a number while it receives, and finishing it with the right digest names that
// number in `registry_blobs` in one short transaction: the bytes are written once, as they arrive.
import { createHash, randomUUID, type Hash } from 'node:crypto';
import { rmSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { inTransaction } from '../store/postgres/statements.js';
import { RegistryError } from './errors.js';
import { BlobCache, teeTo } from './cache.js';
import { annotationsText, linkedOf, type BlobStore, type LinkInfo, type Linked, type LinkRow } from './blobs.js';
import { digestMismatch, meter, OrgQuota, receive, tooManyUploads, uploadBusy, uploadUnknown, type Upload, type UploadLimits, type UploadSessions } from './uploads.js';

/**
 * Bytes per row: as many as fit in one 8 KiB heap page beside the row's header (with the table's
 * toast_tuple_target raised to match). Rows that size stay in the table itself: PostgreSQL would
 * split a larger value into 2 KiB TOAST rows, each with an index entry and a WAL record of its
 * own (writing 200 MB in 4 MiB values took its backend 1.6 times the CPU time of 8 KiB rows).
 */
const ROW_BYTES = 8096;
/** Rows per write to a COPY: one CopyData message of about 64 KiB instead of one per row. */
const ROWS_PER_WRITE = 8;
/** Content read per COPY: a slow reader holds a pooled connection for one such batch at most. */
const BYTES_PER_COPY = 16 * 1024 * 1024;
/** Connections for metadata and reads, and for uploads (each upload being written holds one). */
const READ_CONNECTIONS = 8;
const WRITE_CONNECTIONS = 16;

/** How long a request waits for another one writing to the same upload session before it is refused. */
const BUSY_WAIT_MS = 2000;

const REGISTRY_MIGRATION_LOCK = 0x6b726567; // 'kreg'
/** With the principal's hash: the advisory lock under which a principal's open sessions are counted. */
const UPLOAD_COUNT_LOCK = 0x6b757063; // 'kupc'

/**
 * The tables, created in one go when the last of them is missing. A process starting while
 * uploads stream in touches nothing then: an ALTER TABLE would wait for every upload in progress
 * and hold up every read queued behind it.
 */
const SCHEMA = `
  DO $$ BEGIN
    IF to_regclass('registry_uploads') IS NULL THEN
      CREATE SEQUENCE IF NOT EXISTS registry_content_ids;
      CREATE TABLE IF NOT EXISTS registry_blobs (digest TEXT PRIMARY KEY, size BIGINT NOT NULL, created TEXT NOT NULL);
      ALTER TABLE registry_blobs ADD COLUMN IF NOT EXISTS content BIGINT;
      CREATE TABLE registry_content (content BIGINT NOT NULL, start BIGINT NOT NULL, data BYTEA NOT NULL, PRIMARY KEY (content, start)) WITH (toast_tuple_target = 8160);
      -- Layers are compressed already: PostgreSQL trying again would only cost time.
      ALTER TABLE registry_content ALTER COLUMN data SET STORAGE EXTERNAL;
      CREATE TABLE IF NOT EXISTS registry_links (org TEXT NOT NULL, digest TEXT NOT NULL, media_type TEXT NOT NULL, subject TEXT, artifact_type TEXT, created TEXT NOT NULL, PRIMARY KEY (org, digest));
      CREATE INDEX IF NOT EXISTS registry_links_by_subject ON registry_links (org, subject) WHERE subject IS NOT NULL;
      CREATE INDEX IF NOT EXISTS registry_links_by_digest ON registry_links (digest);
      -- The first layout kept 1 MiB chunks per digest: they become content rows as they are.
      IF to_regclass('registry_chunks') IS NOT NULL THEN
        UPDATE registry_blobs SET content = nextval('registry_content_ids') WHERE content IS NULL;
        INSERT INTO registry_content (content, start, data) SELECT b.content, c.seq::bigint * 1048576, c.data FROM registry_chunks c JOIN registry_blobs b USING (digest);
        DROP TABLE registry_chunks;
      END IF;
      ALTER TABLE registry_blobs ALTER COLUMN content SET NOT NULL;
      CREATE TABLE registry_uploads (id TEXT PRIMARY KEY, org TEXT NOT NULL, repository TEXT NOT NULL, content BIGINT NOT NULL, size BIGINT NOT NULL, touched TIMESTAMPTZ NOT NULL);
    END IF;
    -- Which repository holds what (links made before are derived from the manifests, see repositories.ts),
    -- and who started each upload (open sessions are bounded per principal). Once, like the tables above.
    IF to_regclass('registry_repository_links') IS NULL THEN
      CREATE TABLE registry_repository_links (org TEXT NOT NULL, repository TEXT NOT NULL, digest TEXT NOT NULL, created TEXT NOT NULL, PRIMARY KEY (org, repository, digest));
      CREATE INDEX registry_repository_links_by_digest ON registry_repository_links (org, digest);
      ALTER TABLE registry_uploads ADD COLUMN principal TEXT NOT NULL DEFAULT '';
      ALTER TABLE registry_links ADD COLUMN annotations TEXT;
      CREATE INDEX registry_uploads_by_principal ON registry_uploads (principal);
      CREATE INDEX registry_uploads_by_org ON registry_uploads (org);
    END IF;
    -- What each org links, kept as links come and go (the quota reads it on every chunk); counted from the links once.
    IF to_regclass('registry_org_bytes') IS NULL THEN
      CREATE TABLE registry_org_bytes (org TEXT PRIMARY KEY, bytes BIGINT NOT NULL);
      INSERT INTO registry_org_bytes (org, bytes) SELECT l.org, sum(b.size) FROM registry_links l JOIN registry_blobs b ON b.digest = l.digest GROUP BY l.org;
    END IF;
  END $$;`;

const LINK_SQL = `INSERT INTO registry_links (org, digest, media_type, subject, artifact_type, annotations, created) VALUES ($1, $2, $3, $4, $5, $6, $7)
  ON CONFLICT (org, digest) DO UPDATE SET media_type = CASE WHEN excluded.media_type = '' THEN registry_links.media_type ELSE excluded.media_type END,
    subject = COALESCE(excluded.subject, registry_links.subject), artifact_type = COALESCE(excluded.artifact_type, registry_links.artifact_type),
    annotations = COALESCE(excluded.annotations, registry_links.annotations), created = excluded.created
  RETURNING (xmax = 0) AS fresh`;

const linkParams = (org: string, digest: string, info?: LinkInfo) => [org, digest, info?.mediaType ?? '', info?.subject ?? null, info?.artifactType ?? null, annotationsText(info), new Date().toISOString()];

const HOLD_SQL = 'INSERT INTO registry_repository_links (org, repository, digest, created) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING';

/**
 * Links stored content to the org's repository, in the caller's transaction (which has written or
 * locked the digest's `registry_blobs` row first: every writer of a digest's links takes that row
 * before them, so none waits for another in the opposite order). A new org link adds the
 * content's size to what the org holds.
 */
async function linkWithin(client: pg.PoolClient, org: string, repository: string, digest: string, info?: LinkInfo): Promise<void> {
  const linked = await client.query<{ fresh: boolean }>(LINK_SQL, linkParams(org, digest, info));
  await client.query(HOLD_SQL, [org, repository, digest, new Date().toISOString()]);
  if (linked.rows[0]?.fresh) {
    await client.query('INSERT INTO registry_org_bytes (org, bytes) SELECT $1, size FROM registry_blobs WHERE digest = $2 ON CONFLICT (org) DO UPDATE SET bytes = registry_org_bytes.bytes + excluded.bytes', [org, digest]);
  }
}

/** An org link no repository of the org holds. */
const UNASSIGNED = 'NOT EXISTS (SELECT 1 FROM registry_repository_links r WHERE r.org = registry_links.org AND r.digest = registry_links.digest)';

/** Both halves of the registry on one database: content and links, and the uploads that add to them. */
export function openPostgresRegistry(databaseUrl: string, limits: UploadLimits, cache?: BlobCache): { blobs: PostgresBlobStore; uploads: PostgresUploads } {
  const blobs = new PostgresBlobStore(databaseUrl, cache);
  return { blobs, uploads: new PostgresUploads(blobs, limits) };
}

export class PostgresBlobStore implements BlobStore {
  readonly reads: pg.Pool;
  readonly writes: pg.Pool;
  readonly ready: Promise<void>;

  constructor(
    databaseUrl: string,
    /** Content this process received or read whole, on local disk (none when the cache is off). */
    readonly cache?: BlobCache,
  ) {
    this.reads = new pg.Pool({ connectionString: databaseUrl, max: READ_CONNECTIONS });
    this.writes = new pg.Pool({ connectionString: databaseUrl, max: WRITE_CONNECTIONS });
    this.reads.on('error', () => {});
    this.writes.on('error', () => {});
    // Under an advisory lock: processes starting together would otherwise race on CREATE TABLE.
    this.ready = inTransaction(this.writes, async (client) => {
      await client.query('SELECT pg_advisory_xact_lock($1)', [REGISTRY_MIGRATION_LOCK]);
      await client.query(SCHEMA);
    });
  }

  private async query<R extends pg.QueryResultRow>(sql: string, params: unknown[]): Promise<R[]> {
    await this.ready;
    return (await this.reads.query<R>(sql, params)).rows;
  }

  async linked(org: string, digest: string): Promise<Linked | undefined> {
    const [row] = await this.query<LinkRow>('SELECT l.digest, b.size, l.media_type, l.subject, l.artifact_type FROM registry_links l JOIN registry_blobs b ON b.digest = l.digest WHERE l.org = $1 AND l.digest = $2', [org, digest]);
    return row && linkedOf(row);
  }

  async held(org: string, repository: string, digest: string): Promise<Linked | undefined> {
    const [row] = await this.query<LinkRow>(
      'SELECT l.digest, b.size, l.media_type, l.subject, l.artifact_type FROM registry_repository_links r JOIN registry_links l ON l.org = r.org AND l.digest = r.digest JOIN registry_blobs b ON b.digest = r.digest WHERE r.org = $1 AND r.repository = $2 AND r.digest = $3',
      [org, repository, digest],
    );
    return row && linkedOf(row);
  }

  async exists(digest: string): Promise<boolean> {
    return (await this.query('SELECT 1 FROM registry_blobs WHERE digest = $1', [digest])).length > 0;
  }

  async put(org: string, repository: string, digest: string, content: Buffer, info?: LinkInfo): Promise<void> {
    await this.ready;
    await inTransaction(this.writes, async (client) => {
      // A concurrent push of the same content waits here on the key, then finds it stored.
      const inserted = await client.query<{ content: string }>(
        `INSERT INTO registry_blobs (digest, size, created, content) VALUES ($1, $2, $3, nextval('registry_content_ids')) ON CONFLICT (digest) DO NOTHING RETURNING content`,
        [digest, content.length, new Date().toISOString()],
      );
      if (inserted.rowCount) await pipeline(Readable.from([content]), new Framer(Number(inserted.rows[0].content), 0), copyIn(client));
      else await client.query('SELECT 1 FROM registry_blobs WHERE digest = $1 FOR UPDATE', [digest]);
      await linkWithin(client, org, repository, digest, info);
    });
  }

  async link(org: string, repository: string, digest: string, info?: LinkInfo): Promise<void> {
    await this.ready;
    await inTransaction(this.writes, async (client) => {
      await client.query('UPDATE registry_blobs SET created = $2 WHERE digest = $1', [digest, new Date().toISOString()]);
      await linkWithin(client, org, repository, digest, info);
    });
  }

  async hold(org: string, repository: string, digest: string): Promise<void> {
    await this.query('INSERT INTO registry_repository_links (org, repository, digest, created) SELECT org, $2, digest, $4 FROM registry_links WHERE org = $1 AND digest = $3 ON CONFLICT DO NOTHING', [org, repository, digest, new Date().toISOString()]);
  }

  async unlink(org: string, repository: string, digest: string): Promise<void> {
    await this.ready;
    await inTransaction(this.writes, async (client) => {
      // The digest's row first, as every writer of its links takes it (see linkWithin).
      await client.query('SELECT 1 FROM registry_blobs WHERE digest = $1 FOR UPDATE', [digest]);
      await client.query('DELETE FROM registry_repository_links WHERE org = $1 AND repository = $2 AND digest = $3', [org, repository, digest]);
      await client.query(
        `WITH gone AS (DELETE FROM registry_links WHERE org = $1 AND digest = $2 AND NOT EXISTS (SELECT 1 FROM registry_repository_links WHERE org = $1 AND digest = $2) RETURNING digest)
         UPDATE registry_org_bytes SET bytes = bytes - (SELECT size FROM registry_blobs WHERE digest = $2) WHERE org = $1 AND EXISTS (SELECT 1 FROM gone)`,
        [org, digest],
      );
    });
  }

  /** What the org's quota counts: the content it links and what its upload sessions hold, in one read. */
  async usage(org: string): Promise<number> {
    const [row] = await this.query<{ bytes: string }>(
      'SELECT coalesce((SELECT bytes FROM registry_org_bytes WHERE org = $1), 0) + (SELECT coalesce(sum(size), 0) FROM registry_uploads WHERE org = $1) AS bytes',
      [org],
    );
    return Number(row.bytes);
  }

  async unassigned(): Promise<boolean> {
    return (await this.query(`SELECT 1 FROM registry_links WHERE ${UNASSIGNED} LIMIT 1`, [])).length > 0;
  }

  async forgetUnassigned(): Promise<void> {
    await this.query(
      `WITH gone AS (DELETE FROM registry_links WHERE ${UNASSIGNED} RETURNING org, digest),
         freed AS (SELECT g.org, sum(b.size) AS bytes FROM gone g JOIN registry_blobs b ON b.digest = g.digest GROUP BY g.org)
       UPDATE registry_org_bytes o SET bytes = o.bytes - freed.bytes FROM freed WHERE o.org = freed.org`,
      [],
    );
  }

  read(digest: string, start = 0, end?: number): Readable {
    const store = this;
    return Readable.from(
      (async function* () {
        // Asked even when the cache holds the content: a blob another process removed is not served, and the size checks the file.
        const [blob] = await store.query<{ size: string; content: string }>('SELECT size, content FROM registry_blobs WHERE digest = $1', [digest]);
        if (!blob) {
          store.cache?.drop(digest);
          throw new Error(`blob ${digest} is gone`);
        }
        const size = Number(blob.size);
        const last = Math.min(end ?? size - 1, size - 1);
        if (start > last) return;
        const cached = await store.cache?.open(digest, size, start, last);
        if (cached) return yield* cached;
        const filler = start === 0 && last === size - 1 ? store.cache?.filler(digest, size) : undefined;
        let filled = false;
        let got = 0;
        try {
          for await (const piece of readContent(store.reads, Number(blob.content), start, last)) {
            await filler?.write(piece);
            got += piece.length;
            // Before the last piece goes out: a server may close the stream as soon as the client has all its bytes.
            if (filler && got === size) {
              await filler.commit();
              filled = true;
            }
            yield piece;
          }
        } finally {
          // A reader gone early, or content that failed to arrive: the temp file goes.
          if (!filled) await filler?.abort();
        }
      })(),
      { objectMode: false },
    );
  }

  async referrers(org: string, digest: string, repository?: string): Promise<Linked[]> {
    const inRepository = repository === undefined ? '' : ' AND EXISTS (SELECT 1 FROM registry_repository_links r WHERE r.org = l.org AND r.digest = l.digest AND r.repository = $3)';
    const rows = await this.query<LinkRow>(
      `SELECT l.digest, b.size, l.media_type, l.subject, l.artifact_type, l.annotations FROM registry_links l JOIN registry_blobs b ON b.digest = l.digest WHERE l.org = $1 AND l.subject = $2${inRepository} ORDER BY l.digest`,
      repository === undefined ? [org, digest] : [org, digest, repository],
    );
    return rows.map(linkedOf);
  }

  async candidates(before: string): Promise<string[]> {
    return (await this.query<{ digest: string }>('SELECT digest FROM registry_blobs WHERE created < $1', [before])).map((r) => r.digest);
  }

  async remove(digest: string): Promise<void> {
    await this.ready;
    await inTransaction(this.writes, async (client) => {
      const removed = await client.query<{ content: string; size: string }>('DELETE FROM registry_blobs WHERE digest = $1 RETURNING content, size', [digest]);
      await client.query('DELETE FROM registry_repository_links WHERE digest = $1', [digest]);
      if (removed.rowCount) await client.query('UPDATE registry_org_bytes SET bytes = bytes - $2 WHERE org IN (SELECT org FROM registry_links WHERE digest = $1)', [digest, removed.rows[0].size]);
      await client.query('DELETE FROM registry_links WHERE digest = $1', [digest]);
      if (removed.rowCount) await client.query('DELETE FROM registry_content WHERE content = $1', [removed.rows[0].content]);
    });
    this.cache?.drop(digest);
  }

  async close(): Promise<void> {
    await this.ready.catch(() => {});
    await Promise.all([this.reads.end(), this.writes.end()]);
  }
}

interface Received {
  size: number;
  hash: Hash;
  touched: number;
  /** A temp file holding the same bytes, for the cache (when it is on and every byte came through this process). */
  copy?: string;
}

/**
 * Upload sessions as rows: `registry_uploads` says how many bytes a session holds, its content
 * rows hold them. Each request's bytes go in one transaction, streamed through COPY as they
 * arrive: a body cut short, refused or failing rolls back to where the session was, and any
 * process on the database can take the next request of the session.
 */
export class PostgresUploads implements UploadSessions {
  /**
   * The sha256 of sessions this process received, by id: finishing needs no second read of the
   * content unless another process appended to the session since.
   */
  private readonly hashes = new Map<string, Received>();

  readonly quota: OrgQuota;

  constructor(
    private readonly blobs: PostgresBlobStore,
    private readonly limits: UploadLimits,
  ) {
    this.quota = new OrgQuota(limits.maxOrgBytes, (org) => blobs.usage(org));
  }

  async start(org: string, repository: string, principal: string): Promise<Upload> {
    await this.expire();
    const id = randomUUID();
    await inTransaction(this.blobs.writes, async (client) => {
      // One start per principal at a time, across processes: the count and the insert go together.
      await client.query('SELECT pg_advisory_xact_lock($1, hashtext($2))', [UPLOAD_COUNT_LOCK, principal]);
      const [open] = (await client.query<{ n: string }>('SELECT count(*) AS n FROM registry_uploads WHERE principal = $1', [principal])).rows;
      if (Number(open.n) >= this.limits.maxUploads) throw tooManyUploads(this.limits.maxUploads);
      await client.query(`INSERT INTO registry_uploads (id, org, repository, principal, content, size, touched) VALUES ($1, $2, $3, $4, nextval('registry_content_ids'), 0, now())`, [id, org, repository, principal]);
    });
    this.hashes.set(id, { size: 0, hash: createHash('sha256'), touched: Date.now(), copy: this.blobs.cache?.tempFile() });
    return { id, org, repository, principal, size: 0 };
  }

  async find(org: string, repository: string, id: string): Promise<Upload> {
    await this.blobs.ready;
    const [row] = (await this.blobs.reads.query<{ size: string; principal: string }>('SELECT size, principal FROM registry_uploads WHERE id = $1 AND org = $2 AND repository = $3', [id, org, repository])).rows;
    if (!row) throw uploadUnknown();
    return { id, org, repository, principal: row.principal, size: Number(row.size) };
  }

  async append(upload: Upload, body: Readable, expectedLength?: number): Promise<void> {
    // Closed once the bytes are committed (or dropped): until then this process counts them for the org.
    const charge = await this.quota.open(upload.org);
    let committed = false;
    try {
      await this.receive(upload, body, expectedLength, charge.charge);
      committed = true;
    } finally {
      charge.close(committed);
    }
  }

  private async receive(upload: Upload, body: Readable, expectedLength: number | undefined, charge: (bytes: number) => void): Promise<void> {
    await this.session(upload, async (client, row) => {
      // Another process appended since this request read the session: the chunk no longer starts where it ends.
      if (row.size !== upload.size) throw new RegistryError('BLOB_UPLOAD_INVALID', `the chunk must start at byte ${row.size}`, 416);
      // The WAL is flushed by the commit of any later synchronous write (the manifest that names
      // this content): not waiting for it here costs no durability that a client relies on.
      await client.query('SET LOCAL synchronous_commit = off');
      const known = this.hashes.get(upload.id);
      const hash = known?.size === row.size ? known.hash.copy() : undefined;
      const stage = meter(row.size, this.limits.maxBlobBytes, hash, charge);
      let copy = hash ? known?.copy : undefined;
      // The bytes written to the copy are those hashed, and in the same order.
      const file = copy ? await open(copy, row.size === 0 ? 'w' : 'r+').catch(() => undefined) : undefined;
      const tee = file && teeTo(file, row.size);
      try {
        await receive(body, stage, expectedLength, ...(tee ? [tee] : []), new Framer(row.content, row.size), copyIn(client));
        await tee?.flushed;
      } catch (err) {
        // The session stays where it was and the copy no longer matches it: the copy goes.
        if (known) this.dropCopy(known);
        throw err;
      } finally {
        await file?.close().catch(() => {});
      }
      if (!tee || tee.failed) copy = undefined;
      const size = row.size + stage.received;
      await client.query('UPDATE registry_uploads SET size = $2, touched = now() WHERE id = $1', [upload.id, size]);
      return () => {
        upload.size = size;
        if (known && !copy) this.dropCopy(known);
        if (hash) this.hashes.set(upload.id, { size, hash, touched: Date.now(), copy });
        else this.hashes.delete(upload.id);
      };
    });
  }

  async finish(upload: Upload, claimed: string): Promise<void> {
    let mismatch: Error | undefined;
    let copy: string | undefined;
    try {
      await this.finishSession(upload, claimed, (c) => (copy = c), (err) => (mismatch = err));
    } finally {
      // Whatever did not become the cached content (a failure, a mismatch) goes.
      if (copy) rmSync(copy, { force: true });
    }
    if (mismatch) throw mismatch;
  }

  private async finishSession(upload: Upload, claimed: string, keep: (copy: string | undefined) => void, refuse: (err: Error) => void): Promise<void> {
    await this.session(upload, async (client, row) => {
      const known = this.hashes.get(upload.id);
      this.hashes.delete(upload.id);
      const copy = known?.size === row.size ? known.copy : undefined;
      keep(copy);
      if (known && !copy) this.dropCopy(known);
      const digest = known?.size === row.size ? `sha256:${known.hash.digest('hex')}` : await hashContent(client, row.content, row.size);
      await client.query('SET LOCAL synchronous_commit = off');
      await client.query('DELETE FROM registry_uploads WHERE id = $1', [upload.id]);
      if (digest !== claimed) {
        await client.query('DELETE FROM registry_content WHERE content = $1', [row.content]);
        refuse(digestMismatch(digest, claimed));
        return () => {};
      }
      // A concurrent push of the same content waits here on the key, then finds it stored: this copy goes.
      const inserted = await client.query('INSERT INTO registry_blobs (digest, size, created, content) VALUES ($1, $2, $3, $4) ON CONFLICT (digest) DO NOTHING', [digest, row.size, new Date().toISOString(), row.content]);
      if (!inserted.rowCount) {
        await client.query('DELETE FROM registry_content WHERE content = $1', [row.content]);
        await client.query('UPDATE registry_blobs SET created = $2 WHERE digest = $1', [digest, new Date().toISOString()]);
      }
      await linkWithin(client, upload.org, upload.repository, digest);
      // Once the blob is committed: the copy's bytes were hashed to this digest on their way in.
      return () => {
        if (copy) this.blobs.cache?.adopt(copy, digest, row.size);
        keep(undefined);
      };
    });
  }

  async cancel(upload: Upload): Promise<void> {
    const known = this.hashes.get(upload.id);
    if (known) this.dropCopy(known);
    this.hashes.delete(upload.id);
    await this.blobs.ready;
    await this.blobs.writes.query(`WITH gone AS (DELETE FROM registry_uploads WHERE id = $1 RETURNING content) DELETE FROM registry_content WHERE content IN (SELECT content FROM gone)`, [upload.id]);
  }

  async expire(): Promise<void> {
    const before = Date.now() - this.limits.idleMs;
    await this.blobs.ready;
    // A session a request is writing to is locked by it: skipped, and its commit touches it anew.
    await this.blobs.writes.query(
      `WITH gone AS (DELETE FROM registry_uploads WHERE id IN (SELECT id FROM registry_uploads WHERE touched < $1 FOR UPDATE SKIP LOCKED) RETURNING content)
       DELETE FROM registry_content WHERE content IN (SELECT content FROM gone)`,
      [new Date(before).toISOString()],
    );
    for (const [id, received] of this.hashes) {
      if (received.touched >= before) continue;
      this.dropCopy(received);
      this.hashes.delete(id);
    }
  }

  async close(): Promise<void> {
    for (const received of this.hashes.values()) this.dropCopy(received);
    this.hashes.clear();
  }

  private dropCopy(received: Received): void {
    if (received.copy) rmSync(received.copy, { force: true });
    received.copy = undefined;
  }

  /**
   * Runs `fn` in a transaction holding the session's row: a second request on the same session,
   * through this process or another, waits for it or is refused, never interleaving its bytes. `fn` returns
   * what to do in memory once the transaction has committed. On any failure the connection is
   * dropped, which rolls back whatever a COPY cut short had sent.
   */
  private async session(upload: Upload, fn: (client: pg.PoolClient, row: { size: number; content: number }) => Promise<() => void>): Promise<void> {
    await this.blobs.ready;
    const client = await this.blobs.writes.connect();
    // A connection dropped mid-COPY reports it here too: the request's own error says what happened.
    client.on('error', ignore);
    let failed: Error | undefined;
    try {
      await client.query('BEGIN');
      // A request on a session another one is writing to waits for it a moment: a client retrying
      // at once after its connection broke finds its previous request still rolling back.
      await client.query(`SET LOCAL lock_timeout = ${BUSY_WAIT_MS}`);
      let rows: Array<{ size: string; content: string }>;
      try {
        ({ rows } = await client.query('SELECT size, content FROM registry_uploads WHERE id = $1 AND org = $2 AND repository = $3 FOR UPDATE', [upload.id, upload.org, upload.repository]));
      } catch (err) {
        throw (err as { code?: string }).code === '55P03' ? uploadBusy() : err;
      }
      if (!rows[0]) throw uploadUnknown();
      const after = await fn(client, { size: Number(rows[0].size), content: Number(rows[0].content) });
      await client.query('COMMIT');
      after();
    } catch (err) {
      failed = err as Error;
      throw err;
    } finally {
      client.off('error', ignore);
      client.release(failed);
    }
  }
}

const ignore = () => {};

/** A COPY into the content rows; its failures reach the pipeline feeding it (and only that). */
function copyIn(client: pg.PoolClient) {
  const copy = client.query(copyFrom('COPY registry_content (content, start, data) FROM STDIN (FORMAT binary)'));
  copy.on('error', ignore);
  return copy;
}

const COPY_SIGNATURE = Buffer.from('PGCOPY\n\xff\r\n\0', 'latin1');
/** The signature, the flags field and the header extension's length. */
const COPY_HEADER = Buffer.concat([COPY_SIGNATURE, Buffer.alloc(8)]);
const COPY_TRAILER = Buffer.from([0xff, 0xff]);
/** A content row in: field count, content (length, int8), start (length, int8), data length. */
const ROW_IN_HEADER = 2 + 4 + 8 + 4 + 8 + 4;
/** A row out of `SELECT start, data`: field count, start (length, int8), data length. */
const ROW_OUT_HEADER = 2 + 4 + 8 + 4;

/**
 * Frames bytes as `COPY … FROM STDIN (FORMAT binary)` rows of content `content` from byte
 * `start` on: full rows of ROW_BYTES, the last one shorter. Holds one write's rows at most.
 */
class Framer extends Transform {
  private out = Buffer.allocUnsafe((ROW_IN_HEADER + ROW_BYTES) * ROWS_PER_WRITE);
  /** Bytes of `out` holding finished rows. */
  private used = 0;
  /** Data bytes of the row being filled (its header goes in front once its length is known). */
  private fill = 0;

  constructor(
    private readonly content: number,
    private start: number,
  ) {
    super();
    this.push(COPY_HEADER);
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: (err?: Error | null) => void): void {
    for (let at = 0; at < chunk.length; ) {
      const n = Math.min(ROW_BYTES - this.fill, chunk.length - at);
      chunk.copy(this.out, this.used + ROW_IN_HEADER + this.fill, at, at + n);
      this.fill += n;
      at += n;
      if (this.fill === ROW_BYTES) this.endRow();
    }
    done();
  }

  override _flush(done: (err?: Error | null) => void): void {
    if (this.fill > 0) this.endRow();
    if (this.used > 0) this.push(this.out.subarray(0, this.used));
    this.push(COPY_TRAILER);
    done();
  }

  private endRow(): void {
    let p = this.used;
    p = this.out.writeInt16BE(3, p);
    p = this.out.writeInt32BE(8, p);
    p = this.out.writeBigInt64BE(BigInt(this.content), p);
    p = this.out.writeInt32BE(8, p);
    p = this.out.writeBigInt64BE(BigInt(this.start), p);
    this.out.writeInt32BE(this.fill, p);
    this.used += ROW_IN_HEADER + this.fill;
    this.start += this.fill;
    this.fill = 0;
    if (this.used + ROW_IN_HEADER + ROW_BYTES > this.out.length) {
      this.push(this.out.subarray(0, this.used));
      this.out = Buffer.allocUnsafe(this.out.length);
      this.used = 0;
    }
  }
}

/**
 * Rows come in their order by walking the primary key. Without statistics (a new table, a table
 * that grew fast) the planner may rather collect them through a bitmap and sort them: a sort of
 * megabytes of content that spills to disk, for every read.
 */
const IN_ORDER = 'SET LOCAL enable_sort = off; SET LOCAL enable_bitmapscan = off';

/** Writes of this size at least to the reader: rows come a page at a time, a socket write each would cost more than the copy. */
const READ_PIECE_BYTES = 256 * 1024;

/** Bytes `first` through `last` of content `content`, one COPY per BYTES_PER_COPY. */
async function* readContent(pool: pg.Pool, content: number, first: number, last: number): AsyncGenerator<Buffer> {
  // The row holding byte `first`: rows begin wherever the request that wrote them began, so their lengths vary.
  const [row] = (await pool.query<{ start: string | null }>('SELECT max(start) AS start FROM registry_content WHERE content = $1 AND start <= $2', [content, first])).rows;
  if (row?.start == null) throw new Error(`content ${content} is missing byte ${first}`);
  let next = Number(row.start);
  while (next <= last) {
    const client = await pool.connect();
    let finished = false;
    try {
      const from = next;
      await client.query(`BEGIN; ${IN_ORDER}`);
      const copy = new ContentCopy(
        `SELECT start, data FROM registry_content WHERE content = ${content} AND start >= ${from} AND start < ${from + BYTES_PER_COPY} AND start <= ${last} ORDER BY start`,
        content,
        from,
        first,
        last,
      );
      client.query(copy);
      yield* copy;
      next = copy.next;
      if (next === from) throw new Error(`content ${content} is missing byte ${from}`);
      await client.query('COMMIT');
      finished = true;
    } finally {
      // A reader gone mid-COPY leaves the connection in the middle of it: it cannot serve anyone else.
      client.release(!finished);
    }
  }
}

/** The sha256 of a session's content, read back: for a session another process appended to. */
async function hashContent(client: pg.PoolClient, content: number, size: number): Promise<string> {
  const hash = createHash('sha256');
  await client.query(IN_ORDER);
  const copy = new ContentCopy(`SELECT start, data FROM registry_content WHERE content = ${content} ORDER BY start`, content, 0, 0, Math.max(0, size - 1));
  client.query(copy);
  for await (const piece of copy) hash.update(piece as Buffer);
  if (copy.next !== size) throw new Error(`content ${content} holds ${copy.next} bytes, not ${size}`);
  return `sha256:${hash.digest('hex')}`;
}

/**
 * Content bytes `first` through `last` out of `COPY (SELECT start, data …) TO STDOUT (FORMAT binary)`,
 * run as a query of its own on a pg connection: the rows' data, checked to be contiguous from
 * `next` on, copied straight out of the protocol's messages into pieces of READ_PIECE_BYTES
 * (one copy, no buffer per row; pg reuses the memory of a message once it has handed it over).
 * A reader that does not keep up pauses the connection's socket, and PostgreSQL with it.
 */
class ContentCopy extends Readable {
  private connection?: { stream: NodeJS.ReadableStream & { isPaused(): boolean }; query(text: string): void };
  private readonly rows = new CopiedRows();
  private piece = Buffer.allocUnsafe(READ_PIECE_BYTES);
  private used = 0;
  /** Where the current row's data stands in the content. */
  private offset: number;
  private failure?: Error;

  constructor(
    private readonly text: string,
    private readonly content: number,
    /** The content byte expected next. */
    public next: number,
    private readonly first: number,
    private readonly last: number,
  ) {
    super();
    this.offset = next;
  }

  submit(connection: NonNullable<ContentCopy['connection']>): void {
    this.connection = connection;
    // COPY in binary format hands over the bytes as stored; a query would return bytea as hex text.
    connection.query(`COPY (${this.text}) TO STDOUT (FORMAT binary)`);
  }

  handleCopyData(msg: { chunk: Buffer }): void {
    if (this.failure || this.destroyed) return;
    try {
      for (const item of this.rows.feed(msg.chunk)) {
        if (typeof item === 'number') {
          if (item !== this.next) throw new Error(`content ${this.content} is missing bytes ${this.next}–${item - 1}`);
          this.offset = item;
          continue;
        }
        const low = Math.max(this.first, this.offset);
        const high = Math.min(this.last + 1, this.offset + item.length);
        for (let at = low; at < high; ) {
          const n = Math.min(high - at, this.piece.length - this.used);
          item.copy(this.piece, this.used, at - this.offset, at - this.offset + n);
          this.used += n;
          at += n;
          if (this.used === this.piece.length) this.hand();
        }
        this.offset += item.length;
        this.next = this.offset;
      }
    } catch (err) {
      this.failure = err as Error;
    }
  }

  handleCommandComplete(): void {}

  handleError(err: Error): void {
    this.failure ??= err;
  }

  handleReadyForQuery(): void {
    this.connection?.stream.resume();
    if (!this.failure) {
      try {
        this.rows.end();
      } catch (err) {
        this.failure = err as Error;
      }
    }
    if (this.failure) return void this.destroy(this.failure);
    if (this.used > 0) this.hand();
    this.push(null);
  }

  override _read(): void {
    if (this.connection?.stream.isPaused()) this.connection.stream.resume();
  }

  override _destroy(err: Error | null, done: (err?: Error | null) => void): void {
    // A paused socket would never see its end: the pool frees a dropped connection's place only then.
    this.connection?.stream.resume();
    done(err);
  }

  private hand(): void {
    const full = this.push(this.piece.subarray(0, this.used));
    this.piece = Buffer.allocUnsafe(READ_PIECE_BYTES);
    this.used = 0;
    if (!full) this.connection?.stream.pause();
  }
}

/**
 * Parses `COPY (SELECT start, data …) TO STDOUT (FORMAT binary)` output piece by piece as it
 * arrives: each row's start, then its data as views of the pieces (nothing copied but headers
 * split across two pieces). Synchronous: a promise per row would cost more than the parsing.
 */
class CopiedRows {
  /** Header bytes waiting for the rest of the header. */
  private partial = Buffer.alloc(0);
  private dataLeft = 0;
  private header = true;
  private ended = false;

  feed(piece: Buffer): Array<number | Buffer> {
    const out: Array<number | Buffer> = [];
    let at = 0;
    while (at < piece.length && !this.ended) {
      if (this.dataLeft > 0) {
        const n = Math.min(this.dataLeft, piece.length - at);
        out.push(piece.subarray(at, at + n));
        at += n;
        this.dataLeft -= n;
        continue;
      }
      const want = this.header ? COPY_HEADER.length : ROW_OUT_HEADER;
      let head: Buffer;
      if (this.partial.length === 0 && piece.length - at >= want) {
        head = piece.subarray(at, at + want);
        at += want;
      } else if (!this.header && this.partial.length === 0 && piece.length - at >= 2 && piece.readInt16BE(at) === -1) {
        head = piece.subarray(at, at + 2);
        at += 2;
      } else {
        const n = Math.min(want - this.partial.length, piece.length - at);
        this.partial = Buffer.concat([this.partial, piece.subarray(at, at + n)]);
        at += n;
        if (!(this.partial.length === want || (!this.header && this.partial.length >= 2 && this.partial.readInt16BE(0) === -1))) continue;
        head = this.partial;
        this.partial = Buffer.alloc(0);
      }
      if (this.header) {
        if (!head.subarray(0, COPY_SIGNATURE.length).equals(COPY_SIGNATURE) || head.readUInt32BE(COPY_SIGNATURE.length + 4) !== 0) throw new Error('unexpected COPY header');
        this.header = false;
      } else if (head.readInt16BE(0) === -1) {
        this.ended = true;
      } else {
        if (head.readInt16BE(0) !== 2 || head.readInt32BE(2) !== 8) throw new Error('unexpected COPY row');
        out.push(Number(head.readBigInt64BE(6)));
        this.dataLeft = head.readInt32BE(14);
      }
    }
    return out;
  }

  end(): void {
    if (!this.ended) throw new Error('COPY output ended early');
  }
}
