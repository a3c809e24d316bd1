// A reconciler pass can come late (a busy machine, a restart): a domain still goes through each of
// its stages in turn, one write and one status event each, rather than jumping to the stage its age
// calls for.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import { reconcileDomain } from '../../src/reconcile/others.js';
import { SqliteStore } from '../../src/store/sqlite/store.js';
import type { ItemKey } from '../../src/store/types.js';

const STEP = 1_000;
const CREATED = Date.parse('2026-01-01T00:00:00.000Z');
const key: ItemKey = { org: 'o', kind: 'domain', gvc: '', name: 'app.example.com' };

async function storeWithDomain(): Promise<SqliteStore> {
  const store = new SqliteStore(':memory:');
  const created = new Date(CREATED).toISOString();
  await store.transaction((tx) =>
    tx.insert({ ...key, id: randomUUID(), version: 1, created, lastModified: created, data: { name: key.name, tags: {}, spec: { dnsMode: 'cname' } } }),
  );
  return store;
}

/** One pass at `now`: the stage it leaves and when it asks to run again. */
async function pass(store: SqliteStore, now: number): Promise<[string, number | undefined]> {
  const outcome = await store.transaction((tx) => reconcileDomain({ store, tx, now, stepMs: STEP, audit: true, appended: [] }, key));
  const item = await store.get(key);
  return [(item!.data.status as { status: string }).status, outcome.after];
}

test('a domain first reconciled three steps after it was created writes pendingDnsConfig, then pendingCertificate, then ready', async () => {
  const store = await storeWithDomain();
  try {
    const late = CREATED + 3 * STEP;
    const passes = [await pass(store, late), await pass(store, late), await pass(store, late), await pass(store, late)];
    assert.deepEqual(passes, [
      ['pendingDnsConfig', -2 * STEP], // overdue: the runner runs it again at once
      ['pendingCertificate', -STEP],
      ['ready', undefined],
      ['ready', undefined],
    ]);
    const events = await store.audit({ org: 'o', resourceType: 'domain', actionType: 'status', limit: 10 });
    assert.deepEqual(
      events.map((e) => JSON.parse(e.body).resource.data.status.status),
      ['pendingDnsConfig', 'pendingCertificate', 'ready'],
    );
  } finally {
    await store.close();
  }
});

test('on time, each stage waits for its step', async () => {
  const store = await storeWithDomain();
  try {
    assert.deepEqual(await pass(store, CREATED + STEP / 2), ['pendingDnsConfig', STEP / 2]);
    assert.deepEqual(await pass(store, CREATED + STEP), ['pendingCertificate', STEP]);
    assert.deepEqual(await pass(store, CREATED + 1.5 * STEP), ['pendingCertificate', STEP / 2]);
    assert.deepEqual(await pass(store, CREATED + 2 * STEP), ['ready', undefined]);
  } finally {
    await store.close();
  }
});
