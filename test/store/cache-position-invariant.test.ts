// The PostgreSQL read cache trusts a chain head it read while none of the org's events were pending
// for as long as the cache position does not move (src/store/postgres/read-cache.ts). That holds only
// while the one statement that moves a head without taking a position is the seal, which needs pending
// events (each took a position when it was written). Rows added or removed take one by trigger
// (migration 17). A new statement that moves audit_heads.last_seq any other way must take a position
// too, or the cache would serve a stale Keel-Seq: this test makes that choice explicit.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

const POSTGRES_SOURCES = join(import.meta.dirname, '../../src/store/postgres');

test('the seal is the only statement of the PostgreSQL store that updates audit_heads', () => {
  const updates: string[] = [];
  for (const file of readdirSync(POSTGRES_SOURCES).filter((name) => name.endsWith('.ts'))) {
    const text = readFileSync(join(POSTGRES_SOURCES, file), 'utf8');
    for (const match of text.matchAll(/UPDATE\s+audit_heads\b[^\n]*/gi)) updates.push(`${file}: ${match[0].trim()}`);
  }
  assert.deepEqual(updates, ['store.ts: UPDATE audit_heads h SET last_seq = tip.seq, last_hash = tip.hash']);
  const store = readFileSync(join(POSTGRES_SOURCES, 'store.ts'), 'utf8');
  const seal = store.slice(store.indexOf('const sealStatement'), store.indexOf('const SEAL_STATEMENT'));
  assert.match(seal, /DELETE FROM audit_pending/, 'the head moves only over events taken from audit_pending');
  assert.match(seal, /UPDATE audit_heads/);
});
