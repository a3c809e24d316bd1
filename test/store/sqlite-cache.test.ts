// SQLite specifics: the read cache (a commit by another connection to the same file, such as the
// keel command's, is seen by the next read in a later turn of the event loop; this process's own
// commits at once) and the housekeeping thread that copies the WAL into the database file.
import assert from 'node:assert/strict';
import { closeSync, mkdtempSync, openSync, readSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { test } from 'node:test';
import { SqliteStore } from '../../src/store/sqlite/store.js';
import { storedItem } from '../support/items.js';
import type { StoredItem } from '../../src/store/types.js';

const item = (name: string, description: string): StoredItem => storedItem(name, { data: { name, description, tags: {} } });

test('an in-memory store (one connection for reads and writes) sees its own commits at once', async () => {
  const store = new SqliteStore(':memory:');
  try {
    const key = { org: 'o', kind: 'secret', gvc: '', name: 'alone' };
    assert.equal(await store.get(key), undefined); // cached as absent
    await store.transaction((tx) => tx.insert(item('alone', 'first')));
    const first = await store.get(key);
    assert.equal(first?.data.description, 'first');
    await store.transaction((tx) => tx.update({ ...first!, version: 2, data: { ...first!.data, description: 'second' } }, 1));
    assert.equal((await store.get(key))?.data.description, 'second');
  } finally {
    await store.close();
  }
});

test('cached reads see their own commits at once and another connection\'s by the next turn', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'keel-cache-'));
  const file = join(dir, 'keel.db');
  const server = new SqliteStore(file);
  const other = new SqliteStore(file); // as the keel command would open it
  try {
    const key = { org: 'o', kind: 'secret', gvc: '', name: 'shared' };
    assert.equal(await server.get(key), undefined); // now cached as absent
    await server.transaction((tx) => tx.insert(item('own', 'mine')));
    assert.equal((await server.get({ ...key, name: 'own' }))?.data.description, 'mine');

    await other.transaction((tx) => tx.insert(item('shared', 'from elsewhere')));
    await nextTurn();
    assert.equal((await server.get(key))?.data.description, 'from elsewhere');

    const current = (await server.get(key))!;
    await other.transaction((tx) => tx.update({ ...current, version: 2, data: { ...current.data, description: 'changed elsewhere' } }, 1));
    await nextTurn();
    assert.equal((await server.get(key))?.version, 2);
  } finally {
    await other.close();
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the housekeeping thread copies committed pages from the WAL into the database file while the store is open', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'keel-checkpoint-'));
  const file = join(dir, 'keel.db');
  const store = new SqliteStore(file);
  try {
    const before = statSync(file).size;
    // The writer never checkpoints itself (wal_autocheckpoint = 0): only the thread can grow the file.
    await store.transaction(async (tx) => {
      for (let i = 0; i < 500; i++) await tx.insert(item(`s${i}`, 'x'.repeat(200)));
    });
    const deadline = Date.now() + 10_000;
    while (statSync(file).size <= before) {
      assert.ok(Date.now() < deadline, `the database file stayed at ${before} bytes`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('under writes that never pause, the WAL starts over instead of growing without end', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'keel-wal-'));
  const file = join(dir, 'keel.db');
  const store = new SqliteStore(file);
  // The WAL header's salts change whenever the log starts over from its beginning.
  const salts = () => {
    const fd = openSync(`${file}-wal`, 'r');
    const header = Buffer.alloc(8);
    readSync(fd, header, 0, 8, 16);
    closeSync(fd);
    return header.toString('hex');
  };
  try {
    const items = Array.from({ length: 64 }, (_, i) => item(`w${i}`, ''));
    await store.transaction(async (tx) => {
      for (const it of items) await tx.insert(it);
    });
    const first = salts();
    // Each round rewrites 64 items of 4 KB in one group commit, back to back: a passive checkpoint alone never catches up.
    for (let round = 1; salts() === first; round++) {
      assert.ok(round <= 600, `the WAL never started over; it holds ${statSync(`${file}-wal`).size} bytes`);
      await Promise.all(
        items.map((it, i) =>
          store.transaction(async (tx) => {
            const current = (await tx.get(it))!;
            await tx.update({ ...current, version: current.version + 1, data: { ...current.data, description: String(round).repeat(4000 / String(round).length) } }, current.version);
            items[i] = current;
          }),
        ),
      );
    }
    assert.ok(statSync(`${file}-wal`).size < 128 * 2 ** 20, `${statSync(`${file}-wal`).size} bytes of WAL`);
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
