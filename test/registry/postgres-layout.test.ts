// PostgreSQL content written in the registry's first layout (1 MiB chunks per digest) is served
// after an upgrade: the tables are converted once, blob for blob, and whole or ranged reads give
// the same bytes.
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { test } from 'node:test';
import pg from 'pg';
import { openPostgresRegistry } from '../../src/registry/postgres.js';
import { createTestSchema, postgresAvailable } from '../support/postgres.js';

const available = await postgresAvailable();
const MiB = 1024 * 1024;

test('registry content of the first PostgreSQL layout is converted and served byte for byte', { skip: !available && 'PostgreSQL unavailable' }, async (t) => {
  const schema = await createTestSchema('keel_registry_layout');
  t.after(() => schema.drop());
  const content = randomBytes(2 * MiB + 4321);
  const digest = `sha256:${createHash('sha256').update(content).digest('hex')}`;
  const old = new pg.Client({ connectionString: schema.url });
  await old.connect();
  try {
    await old.query(`
      CREATE TABLE registry_blobs (digest TEXT PRIMARY KEY, size BIGINT NOT NULL, created TEXT NOT NULL);
      CREATE TABLE registry_chunks (digest TEXT NOT NULL, seq INTEGER NOT NULL, data BYTEA NOT NULL, PRIMARY KEY (digest, seq));
      CREATE TABLE registry_links (org TEXT NOT NULL, digest TEXT NOT NULL, media_type TEXT NOT NULL, subject TEXT, artifact_type TEXT, created TEXT NOT NULL, PRIMARY KEY (org, digest));`);
    await old.query('INSERT INTO registry_blobs VALUES ($1, $2, $3)', [digest, content.length, new Date().toISOString()]);
    for (let seq = 0; seq * MiB < content.length; seq++) await old.query('INSERT INTO registry_chunks VALUES ($1, $2, $3)', [digest, seq, content.subarray(seq * MiB, (seq + 1) * MiB)]);
    await old.query(`INSERT INTO registry_links VALUES ('acme', $1, '', NULL, NULL, $2)`, [digest, new Date().toISOString()]);
  } finally {
    await old.end();
  }

  const { blobs, uploads } = openPostgresRegistry(schema.url, { maxBlobBytes: 10 * MiB, maxOrgBytes: 100 * MiB, maxUploads: 16, idleMs: 3_600_000 });
  try {
    assert.deepEqual(await blobs.linked('acme', digest), { digest, size: content.length, mediaType: '', subject: undefined, artifactType: undefined });
    const read = async (start?: number, end?: number) => {
      const pieces: Buffer[] = [];
      for await (const piece of blobs.read(digest, start, end)) pieces.push(piece as Buffer);
      return Buffer.concat(pieces);
    };
    assert.ok((await read()).equals(content), 'the whole blob');
    assert.ok((await read(MiB - 5, 2 * MiB + 7)).equals(content.subarray(MiB - 5, 2 * MiB + 8)), 'a range across the old chunks');
    // New content lands beside it in the new layout, and the same content is not stored twice.
    const upload = await uploads.start('acme', 'app', 'tester');
    await uploads.append(upload, Readable.from([content]));
    await uploads.finish(upload, digest);
    assert.ok((await read()).equals(content));
    const check = new pg.Client({ connectionString: schema.url });
    await check.connect();
    try {
      assert.equal((await check.query(`SELECT to_regclass('registry_chunks') AS t`)).rows[0].t, null, 'the old table is gone');
      assert.equal((await check.query('SELECT DISTINCT content FROM registry_content')).rowCount, 1, 'one copy of the content');
    } finally {
      await check.end();
    }
  } finally {
    await uploads.close();
    await blobs.close();
  }
});
