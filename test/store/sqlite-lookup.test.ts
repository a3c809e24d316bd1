// SQLite's audit lookups (by resource, time and id) live in a file of their own that a worker
// thread keeps up to date (src/store/sqlite/lookup.ts). They are derived data: whatever state the
// file is in, or if it is gone, queries that use them still find exactly the org's matching events.
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { copyFileSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { verifyChain } from '../../src/audit/verify.js';
import { Housekeeper } from '../../src/store/sqlite/housekeeper.js';
import { SqliteStore } from '../../src/store/sqlite/store.js';
import type { NewAuditEvent } from '../../src/store/types.js';
import { auditEvent } from '../support/items.js';

function event(org: string, n: number, resourceId = `${org}-r${n % 3}`): NewAuditEvent {
  return auditEvent({
    org,
    id: `${org}-event-${n}`,
    context: 'cpln',
    eventTime: `2026-01-01T00:00:${String(n).padStart(2, '0')}.000Z`,
    resourceType: 'gvc',
    resourceName: `g${n % 3}`,
    resourceId,
    subjectName: 'admin',
    actionType: 'edit',
  });
}

/** Ten events in each of two orgs, appended interleaved. */
async function fill(store: SqliteStore): Promise<void> {
  for (let n = 1; n <= 10; n++) {
    await store.transaction(async (tx) => {
      await tx.appendAudit(event('a', n));
      await tx.appendAudit(event('b', n));
    });
  }
}

/** What every lookup-driven filter finds, as seqs. */
async function found(store: SqliteStore, org: string) {
  const seqs = async (filter: object) => (await store.audit({ org, limit: 100, ...filter })).map((e) => e.seq);
  return {
    byResource: await seqs({ resourceId: `${org}-r1` }),
    byId: await seqs({ id: `${org}-event-7` }),
    byTime: await seqs({ from: '2026-01-01T00:00:08.000Z', to: '2026-01-01T00:00:09.000Z' }),
    otherOrgsResource: await seqs({ resourceId: org === 'a' ? 'b-r1' : 'a-r1' }),
  };
}

const expected = { byResource: [1, 4, 7, 10], byId: [7], byTime: [8, 9], otherOrgsResource: [] };

function withFile(run: (file: string, dir: string) => Promise<void>) {
  return async () => {
    const dir = mkdtempSync(join(tmpdir(), 'keel-lookup-'));
    try {
      await run(join(dir, 'keel.db'), dir);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  };
}

/** Opens the store on `file` for `run`, and closes it whatever happens. */
async function withStore<T>(file: string, run: (store: SqliteStore) => Promise<T>): Promise<T> {
  const store = new SqliteStore(file);
  try {
    return await run(store);
  } finally {
    await store.close();
  }
}

test(
  'lookups find each org\'s events, and are rebuilt when their file is removed',
  withFile(async (file, dir) => {
    await withStore(file, async (store) => {
      await fill(store);
      assert.deepEqual(await found(store, 'a'), expected);
      assert.deepEqual(await found(store, 'b'), expected);
    });

    for (const name of readdirSync(dir)) if (name.startsWith('keel.db-lookup')) rmSync(join(dir, name));
    await withStore(file, async (store) => {
      assert.deepEqual(await found(store, 'a'), expected);
      assert.deepEqual(await found(store, 'b'), expected);
    });
  }),
);

test(
  'a lookup file of an older layout is rebuilt',
  withFile(async (file) => {
    await withStore(file, fill);
    // As an earlier Keel left it: no fields table, and its layout version unset.
    const lookup = new Database(`${file}-lookup`);
    lookup.exec('DROP TABLE audit_fields; PRAGMA user_version = 0');
    lookup.close();
    await withStore(file, async (store) => {
      assert.deepEqual(await found(store, 'a'), expected);
      assert.deepEqual((await store.audit({ org: 'b', resourceName: 'g1', limit: 100 })).map((e) => e.seq), [1, 4, 7, 10]);
    });
  }),
);

test(
  'a lookup file made from other events (a restored database) is rebuilt for the orgs it does not match',
  withFile(async (file) => {
    await withStore(file, async (store) => {
      await fill(store);
      assert.deepEqual(await found(store, 'a'), expected);
    });

    // As if the events file were restored from a copy older than the lookups: marks past the head.
    const lookup = new Database(`${file}-lookup`);
    lookup.prepare("UPDATE lookup_through SET seq = seq + 5 WHERE org = 'a'").run();
    lookup.prepare("DELETE FROM audit_lookup WHERE org = 'a' AND key = 'r:a-r1'").run();
    lookup.close();
    await withStore(file, async (store) => {
      assert.deepEqual(await found(store, 'a'), expected);
      // Events appended after the restore are found too.
      await store.transaction((tx) => tx.appendAudit(event('a', 13)));
      assert.deepEqual((await store.audit({ org: 'a', resourceId: 'a-r1', limit: 100 })).map((e) => e.seq), [1, 4, 7, 10, 11]);
    });
  }),
);

test(
  'events appended to a restored copy of the database are found, though the lookups had gone past its head',
  withFile(async (file, dir) => {
    await withStore(file, fill); // closing, the last connection folds the WAL into the file
    const backup = join(dir, 'backup.db');
    copyFileSync(file, backup);

    await withStore(file, async (store) => {
      for (let n = 11; n <= 15; n++) await store.transaction((tx) => tx.appendAudit(event('a', n)));
      assert.equal((await store.audit({ org: 'a', resourceId: 'a-r1', limit: 100 })).length, 5); // lookups now through seq 15
    });

    // The restore: seq 10 is the head again (and no log of the replaced file is left to replay).
    for (const name of readdirSync(dir)) if (name.startsWith('keel.db-wal') || name.startsWith('keel.db-shm')) rmSync(join(dir, name));
    copyFileSync(backup, file);
    await withStore(file, async (store) => {
      for (let n = 11; n <= 18; n++) await store.transaction((tx) => tx.appendAudit(event('a', n, 'after-restore')));
      assert.deepEqual((await store.audit({ org: 'a', resourceId: 'after-restore', limit: 100 })).map((e) => e.seq), [11, 12, 13, 14, 15, 16, 17, 18]);
      assert.deepEqual(await found(store, 'a'), expected);
    });
  }),
);

test(
  'retention removes the lookups of the events it removed, and the chain still verifies',
  withFile((file) =>
    withStore(file, async (store) => {
      await fill(store);
      assert.equal(await store.pruneAudit('a', { before: '2026-01-01T00:00:05.000Z' }), 4);
      assert.deepEqual((await store.audit({ org: 'a', resourceId: 'a-r1', limit: 100 })).map((e) => e.seq), [7, 10]);
      const lookup = new Database(`${file}-lookup`, { readonly: true });
      try {
        const left = lookup.prepare("SELECT COUNT(*) FROM audit_lookup WHERE org = 'a'").pluck().get();
        assert.equal(left, 3 * 6, 'three entries (resource, time, id) for each of the six events left');
      } finally {
        lookup.close();
      }
      assert.equal((await verifyChain(store, 'a')).ok, true);
      assert.deepEqual(await found(store, 'b'), expected);
    }),
  ),
);

test('an in-memory store keeps its lookups itself', () =>
  withStore(':memory:', async (store) => {
    await fill(store);
    assert.deepEqual(await found(store, 'a'), expected);
    assert.deepEqual(await found(store, 'b'), expected);
  }),
);

test('a query that needs the lookups fails, and does not wait forever, when the housekeeping thread is gone', { timeout: 20_000 }, async () => {
  // A file the thread cannot open: it fails as it starts.
  const housekeeper = new Housekeeper(join(tmpdir(), 'keel-no-such-dir', 'x', 'keel.db'), { everyMs: 250, restartFrames: 4000, restartTurnMs: 200, lookupFile: ':memory:', lookupEveryMs: 1000 }, () => {});
  try {
    await assert.rejects(housekeeper.catchUp(), /housekeeping thread/);
    await assert.rejects(housekeeper.catchUp(), /housekeeping thread/);
  } finally {
    await housekeeper.stop();
  }
});

test(
  'a read that comes while a catch-up runs waits for one that starts after it, and sees what was committed before it',
  { timeout: 30_000 },
  withFile((file) =>
    withStore(file, async (store) => {
      await store.transaction(async (tx) => {
        for (let n = 1; n <= 2000; n++) await tx.appendAudit(event('a', n));
      });
      // The thread raises its flag to write the seals it computed, after reading the events it seals.
      const flag = store['housekeeper']!['wantsLock'];
      const raised = (Atomics as unknown as { waitAsync(a: Int32Array, i: number, v: number, ms: number): { value: unknown } }).waitAsync(flag, 0, 0, 20_000).value;
      const first = store.audit({ org: 'a', limit: 1 });
      await raised;
      await store.transaction((tx) => tx.appendAudit(event('a', 2001)));
      assert.deepEqual((await store.audit({ org: 'a', afterSeq: 2000, limit: 10 })).map((e) => e.seq), [2001]);
      assert.equal((await first).length, 1);
    }),
  ),
);

test(
  'a read sees events another process appended after this one had caught up',
  withFile((file) =>
    withStore(file, async (store) => {
      await fill(store);
      assert.equal((await store.audit({ org: 'a', limit: 100 })).length, 10);
      await withStore(file, (other) => other.transaction((tx) => tx.appendAudit(event('a', 11))));
      assert.deepEqual((await store.audit({ org: 'a', resourceId: 'a-r2', limit: 100 })).map((e) => e.seq), [2, 5, 8, 11]);
    }),
  ),
);
