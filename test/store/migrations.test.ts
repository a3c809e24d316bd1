// A database made by an earlier Keel is brought up to date on open, keeping every audit event
// and its chain (migration 5 rebuilds SQLite's audit table; migration 7 moves its lookups by resource
// and time to audit_lookup; migration 9 moves the hashes to seals and reads the other fields from
// the bodies, where every Keel has written them).
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { chainHash } from '../../src/audit/chain.js';
import { verifyChain } from '../../src/audit/verify.js';
import { migrations } from '../../src/store/migrations.js';
import { SqliteStore } from '../../src/store/sqlite/store.js';
import { auditEvent } from '../support/items.js';

const time = (seq: number) => `2026-01-01T00:00:${String(seq).padStart(2, '0')}.000Z`;

test('a SQLite database at schema 4 with audit events migrates with its chain intact, and the new table serves every filter', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'keel-migrate-'));
  try {
    const file = join(dir, 'keel.db');
    const old = new Database(file);
    old.exec('CREATE TABLE keel_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied TEXT NOT NULL)');
    let hash = '';
    for (const step of migrations.filter((m) => m.version <= 4)) {
      old.exec(step.sql.sqlite);
      old.prepare('INSERT INTO keel_migrations VALUES (?, ?, ?)').run(step.version, step.name, 'then');
    }
    const insert = old.prepare('INSERT INTO audit_events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)');
    for (let seq = 1; seq <= 30; seq++) {
      const context = seq % 10 === 0 ? 'deploys' : 'cpln';
      const e = auditEvent({ org: 'o', id: `id-${seq}`, context, eventTime: time(seq), resourceType: 'gvc', resourceName: `g${seq % 3}`, resourceId: `r${seq % 3}`, subjectName: 'admin', actionType: 'edit' });
      hash = chainHash(hash, seq, e.body);
      insert.run('o', seq, e.id, context, e.eventTime, 'gvc', e.resourceName, e.resourceId, 'admin', 'edit', hash, e.body);
    }
    old.prepare('INSERT INTO audit_heads VALUES (?, ?, ?)').run('o', 30, hash);
    // A second org, whose events must keep to it once each org has its own range of rows (migration 8).
    let otherHash = '';
    for (let seq = 1; seq <= 5; seq++) {
      const e = auditEvent({ org: 'p', id: `p-id-${seq}`, context: 'cpln', eventTime: time(seq), resourceType: 'gvc', resourceName: 'g1', resourceId: 'r1', subjectName: 'admin', actionType: 'edit' });
      otherHash = chainHash(otherHash, seq, e.body);
      insert.run('p', seq, e.id, 'cpln', e.eventTime, 'gvc', 'g1', 'r1', 'admin', 'edit', otherHash, e.body);
    }
    old.prepare('INSERT INTO audit_heads VALUES (?, ?, ?)').run('p', 5, otherHash);
    old.close();

    const store = new SqliteStore(file);
    try {
      assert.equal((await store.audit({ org: 'o', limit: 100 })).length, 30);
      assert.deepEqual(
        (await store.audit({ org: 'o', context: 'deploys', limit: 100 })).map((e) => e.seq),
        [10, 20, 30],
      );
      assert.equal((await store.audit({ org: 'o', context: 'cpln', afterSeq: 25, limit: 100 })).length, 4);
      assert.equal((await store.audit({ org: 'o', resourceId: 'r1', limit: 100 })).length, 10);
      assert.equal((await store.audit({ org: 'o', from: '2026-01-01T00:00:28.000Z', limit: 100 })).length, 3);
      const report = await verifyChain(store, 'o');
      assert.equal(report.ok, true, JSON.stringify(report));
      assert.deepEqual((await store.audit({ org: 'p', limit: 100 })).map((e) => e.id), ['p-id-1', 'p-id-2', 'p-id-3', 'p-id-4', 'p-id-5']);
      assert.deepEqual((await store.audit({ org: 'p', resourceId: 'r1', limit: 100 })).map((e) => e.seq), [1, 2, 3, 4, 5]);
      assert.equal((await verifyChain(store, 'p')).ok, true);
      // Appending continues the chain where the old table left it.
      await store.transaction((tx) =>
        tx.appendAudit(auditEvent({ org: 'o', id: 'id-31', context: 'cpln', eventTime: new Date().toISOString(), resourceType: 'gvc', resourceName: 'g', resourceId: 'r', subjectName: 'admin', actionType: 'edit' })),
      );
      assert.equal((await store.auditHead('o')).seq, 31);
      assert.equal((await verifyChain(store, 'o')).ok, true);
      // Found by resource and time like the events the migration carried over.
      assert.deepEqual((await store.audit({ org: 'o', resourceId: 'r', limit: 100 })).map((e) => e.seq), [31]);
      assert.equal((await store.audit({ org: 'o', from: '2026-01-01T00:00:28.000Z', limit: 100 })).length, 4);
    } finally {
      await store.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
