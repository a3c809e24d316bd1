// A reconciler pass can come late (a busy machine, a restart): a domain still goes through each of
// its stages in turn, one write and one status event each, rather than jumping to the stage its age
// calls for. The reconciler is called directly, on each backend, at a chosen clock.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { reconcileDomain } from '../../src/reconcile/others.js';
import type { ItemKey, Store } from '../../src/store/types.js';
import { storedItem } from '../support/items.js';
import { forEachBackend, storeFor } from '../support/keel.js';

const STEP = 1_000;
const CREATED = Date.parse('2026-01-01T00:00:00.000Z');

forEachBackend('domain stages', (backend) => {
  let store: Store;
  let cleanup: () => Promise<void>;
  before(async () => ({ store, cleanup } = await storeFor(backend)));
  after(async () => {
    await store.close();
    await cleanup();
  });

  /** A new domain, created at CREATED, with no status yet. */
  async function domain(name: string): Promise<ItemKey> {
    const created = new Date(CREATED).toISOString();
    const item = storedItem(name, { kind: 'domain', created, lastModified: created, data: { name, tags: {}, spec: { dnsMode: 'cname' } } });
    await store.transaction((tx) => tx.insert(item));
    return { org: item.org, kind: item.kind, gvc: '', name };
  }

  /** One pass at `now`: the stage it leaves and when it asks to run again. */
  async function pass(key: ItemKey, now: number): Promise<[string, number | undefined]> {
    const outcome = await store.transaction((tx) => reconcileDomain({ store, tx, now, stepMs: STEP, audit: true, appended: [] }, key));
    const item = await store.get(key);
    return [(item!.data.status as { status: string }).status, outcome.after];
  }

  test('a domain first reconciled three steps after it was created writes pendingDnsConfig, then pendingCertificate, then ready', async () => {
    const key = await domain('late.example.com');
    const late = CREATED + 3 * STEP;
    const passes = [await pass(key, late), await pass(key, late), await pass(key, late), await pass(key, late)];
    assert.deepEqual(passes, [
      ['pendingDnsConfig', -2 * STEP], // overdue: the runner runs it again at once
      ['pendingCertificate', -STEP],
      ['ready', undefined],
      ['ready', undefined],
    ]);
    const events = await store.audit({ org: key.org, resourceType: 'domain', resourceName: key.name, actionType: 'status', limit: 10 });
    assert.deepEqual(
      events.map((e) => JSON.parse(e.body).resource.data.status.status),
      ['pendingDnsConfig', 'pendingCertificate', 'ready'],
    );
  });

  test('on time, each stage waits for its step', async () => {
    const key = await domain('on-time.example.com');
    assert.deepEqual(await pass(key, CREATED + STEP / 2), ['pendingDnsConfig', STEP / 2]);
    assert.deepEqual(await pass(key, CREATED + STEP), ['pendingCertificate', STEP]);
    assert.deepEqual(await pass(key, CREATED + 1.5 * STEP), ['pendingCertificate', STEP / 2]);
    assert.deepEqual(await pass(key, CREATED + 2 * STEP), ['ready', undefined]);
  });
});
