// SQLite seals audit events after they commit, in the housekeeping thread (src/store/sqlite/seals.ts).
// Events a stopped Keel left unsealed are sealed when it opens again, into the same chain; an event
// missing from them stops the seals there, and verification reports the rest as removed.
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { verifyChain } from '../../src/audit/verify.js';
import { SqliteStore } from '../../src/store/sqlite/store.js';
import { auditEvent } from '../support/items.js';
import { SQLITE_EVENT_AT } from '../support/raw-sql.js';

const event = (n: number) =>
  auditEvent({ org: 'o', id: `e${n}`, context: 'cpln', eventTime: new Date().toISOString(), resourceType: 'gvc', resourceName: `g${n}`, resourceId: `r${n}`, subjectName: 'admin', actionType: 'edit' });

/** Five events in org o, then, with the store closed, `tamper` on the database. */
async function fiveEventsThen(file: string, tamper: (db: Database.Database) => void): Promise<string> {
  const store = new SqliteStore(file);
  let head: string;
  try {
    for (let n = 1; n <= 5; n++) await store.transaction((tx) => tx.appendAudit(event(n)));
    head = (await store.auditHead('o')).hash;
  } finally {
    await store.close();
  }
  const db = new Database(file);
  try {
    // As if Keel had stopped before sealing any of them.
    db.exec("DELETE FROM audit_seals; UPDATE audit_heads SET sealed_seq = 0, last_hash = ''");
    tamper(db);
  } finally {
    db.close();
  }
  return head;
}

async function withReopened(file: string, run: (store: SqliteStore) => Promise<void>): Promise<void> {
  const store = new SqliteStore(file);
  try {
    await run(store);
  } finally {
    await store.close();
  }
}

test('events left unsealed are sealed when the store opens again, into the same chain', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'keel-seals-'));
  try {
    const file = join(dir, 'keel.db');
    const head = await fiveEventsThen(file, () => {});
    await withReopened(file, async (store) => {
      assert.deepEqual((await store.audit({ org: 'o', limit: 10 })).map((e) => e.seq), [1, 2, 3, 4, 5]);
      assert.deepEqual(await store.auditHead('o'), { seq: 5, hash: head, prunedUpTo: 0, prunedHash: '' });
      assert.deepEqual(await verifyChain(store, 'o'), { ok: true, events: 5, from: 1, to: 5, restores: [] });
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('an unsealed event that goes missing stops the seals, and verification reports the events after it as removed', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'keel-seals-'));
  try {
    const file = join(dir, 'keel.db');
    await fiveEventsThen(file, (db) => {
      const removed = db.prepare(`DELETE FROM audit_events WHERE ${SQLITE_EVENT_AT}`).run('o', 4);
      assert.equal(removed.changes, 1);
    });
    await withReopened(file, async (store) => {
      assert.deepEqual((await store.audit({ org: 'o', limit: 10 })).map((e) => e.seq), [1, 2, 3]);
      const report = await verifyChain(store, 'o');
      assert.equal(report.ok, false);
      assert.equal(!report.ok && report.brokenAt, 4);
      assert.match(!report.ok ? report.reason : '', /events were removed/);
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
