// What Keel keeps on disk holds secrets, so it is Keel's alone: `keel serve` (SQLite, snapshots on,
// the registry used once) leaves its data directory 0700 and every file in it 0600 (directories
// 0700): the database and its -wal/-shm, admin.token, snapshots, registry blobs. A data directory an
// older Keel left readable by every local user is tightened on start.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { chmodSync, lstatSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { after, test } from 'node:test';
import { spawnKeel } from './support/spawn-keel.js';

const dataDir = mkdtempSync(join(tmpdir(), 'keel-modes-'));
after(() => rmSync(dataDir, { recursive: true, force: true }));

/** Starts `keel serve` (SQLite, snapshots on) on the data directory. */
const serve = () => spawnKeel('', { KEEL_ALLOW_SNAPSHOTS: 'on' }, { dataDir });

/** Every file and directory under the data directory, with its permission bits. */
function modes(): Map<string, { dir: boolean; mode: number }> {
  const all = new Map<string, { dir: boolean; mode: number }>();
  const walk = (path: string) => {
    const stat = lstatSync(path);
    all.set(relative(dataDir, path) || '.', { dir: stat.isDirectory(), mode: stat.mode & 0o777 });
    if (stat.isDirectory()) for (const name of readdirSync(path)) walk(join(path, name));
  };
  walk(dataDir);
  return all;
}

function assertPrivate(when: string): Map<string, { dir: boolean; mode: number }> {
  const all = modes();
  const open = [...all].filter(([, m]) => m.mode !== (m.dir ? 0o700 : 0o600)).map(([path, m]) => `${path} ${m.mode.toString(8)}`);
  assert.deepEqual(open, [], `${when}: every directory is 0700 and every file 0600`);
  return all;
}

test('keel serve keeps its data directory to itself, and tightens one an older Keel left open', async () => {
  const keel = await serve();
  try {
    const token = readFileSync(join(dataDir, 'admin.token'), 'utf8').trim();
    const bearer = { authorization: `Bearer ${token}` };
    const saved = await fetch(`${keel.base}/-admin/snapshots`, { method: 'POST', headers: { ...bearer, 'content-type': 'application/json' }, body: JSON.stringify({ name: 'first' }) });
    assert.equal(saved.status, 201, await saved.text());
    // One blob pushed to the registry as a client does: start an upload, then finish it with its digest.
    const basic = { authorization: `Basic ${Buffer.from(`any:${token}`).toString('base64')}` };
    const started = await fetch(`${keel.base}/v2/app/blobs/uploads/`, { method: 'POST', headers: basic });
    assert.equal(started.status, 202, await started.text());
    const blob = Buffer.from('a layer of secrets\n');
    const digest = `sha256:${createHash('sha256').update(blob).digest('hex')}`;
    const location = new URL(started.headers.get('location')!, keel.base);
    location.searchParams.set('digest', digest);
    const put = await fetch(location, { method: 'PUT', headers: { ...basic, 'content-type': 'application/octet-stream' }, body: blob });
    assert.equal(put.status, 201, await put.text());

    const all = assertPrivate('after a first start');
    for (const name of ['keel.db', 'keel.db-wal', 'keel.db-shm', 'admin.token']) assert.ok(all.has(name), `${name} is there`);
    assert.equal(all.get('.')!.mode, 0o700);
    assert.ok([...all].some(([path, m]) => !m.dir && path.startsWith('snapshots')), 'the snapshot is there');
    assert.ok([...all].some(([path, m]) => !m.dir && path.startsWith('registry') && readFileSync(join(dataDir, path)).equals(blob)), 'the blob is there');
  } finally {
    await keel.stop();
  }

  // As an older Keel left it: everything readable by every local user.
  for (const [path, m] of modes()) chmodSync(join(dataDir, path), m.dir ? 0o755 : 0o644);
  const again = await serve();
  try {
    assertPrivate('after a start on a data directory left open');
  } finally {
    await again.stop();
  }
});
