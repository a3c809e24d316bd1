// One storage conformance suite, run unchanged against every backend.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { randomUUID } from 'node:crypto';
import { ApiError } from '../../src/errors.js';
import type { AuditFilter, NewAuditEvent, Store, StoredItem, Tx } from '../../src/store/types.js';
import { forEachBackend, storeFor } from '../support/keel.js';
import { auditEvent, storedItem as item } from '../support/items.js';
import { verifyChain } from '../../src/audit/verify.js';
import { openStore } from '../../src/store/open.js';

const all = (org: string, kind: string, gvc?: string) => ({
  org,
  kind,
  gvc,
  limit: 1000,
  build: () => ({ where: '1 = 1', orderBy: 'r.name, r.gvc' }),
});

forEachBackend('store conformance', (backend) => {
  let store: Store;
  let cleanup: () => Promise<void>;
  /** Opens a second store on the same database, as another Keel process would. */
  let another: () => Promise<Store>;
  before(async () => {
    let dir: string;
    let url: string | undefined;
    ({ store, cleanup, dir, url } = await storeFor(backend));
    another = () => openStore({ dataDir: dir, databaseUrl: url });
  });
  after(async () => {
    await store.close();
    await cleanup();
  });

  test('an inserted item reads back with every column and its body', async () => {
    const it = item('a', { data: { name: 'a', tags: { team: 'core' }, spec: { n: 1, nested: { ok: true } } } });
    await store.transaction((tx) => tx.insert(it));
    assert.deepEqual(await store.get(it), it);
    assert.equal(await store.get({ ...it, name: 'missing' }), undefined);
  });

  test('a second insert of the same key is already_exists and leaves the first intact', async () => {
    const first = item('dup');
    await store.transaction((tx) => tx.insert(first));
    await assert.rejects(store.transaction((tx) => tx.insert(item('dup'))), (e: unknown) => e instanceof ApiError && e.code === 'already_exists');
    assert.equal((await store.get(first))!.id, first.id);
  });

  test('the same name may exist in two GVCs and in two orgs', async () => {
    await store.transaction(async (tx) => {
      await tx.insert(item('w', { kind: 'workload', gvc: 'g1' }));
      await tx.insert(item('w', { kind: 'workload', gvc: 'g2' }));
      await tx.insert(item('w', { org: 'other', kind: 'workload', gvc: 'g1' }));
    });
    assert.equal((await store.list(all('o', 'workload'))).length, 2);
    assert.equal((await store.list(all('o', 'workload', 'g1'))).length, 1);
    assert.equal(await store.transaction((tx) => tx.countInGvc('o', 'workload', 'g2')), 1);
  });

  test('an update with the current version applies; a stale one is a conflict and changes nothing', async () => {
    const it = item('v');
    await store.transaction((tx) => tx.insert(it));
    const next = { ...it, version: 2, data: { ...it.data, description: 'two' } };
    await store.transaction((tx) => tx.update(next, 1));
    await assert.rejects(
      store.transaction((tx) => tx.update({ ...it, version: 2, data: { name: 'v', description: 'stale' } }, 1)),
      (e: unknown) => e instanceof ApiError && e.code === 'conflict',
    );
    const stored = await store.get(it);
    assert.equal(stored!.version, 2);
    assert.equal(stored!.data.description, 'two');
  });

  test('a transaction that fails part-way leaves nothing behind', async () => {
    await assert.rejects(
      store.transaction(async (tx) => {
        await tx.insert(item('half-1'));
        await tx.insert(item('half-2'));
        throw new Error('boom');
      }),
      /boom/,
    );
    assert.equal(await store.get(item('half-1')), undefined);
    assert.equal(await store.get(item('half-2')), undefined);
  });

  test('reads outside a transaction never see its uncommitted writes', async () => {
    let seenInside: StoredItem | undefined;
    let seenOutside: StoredItem | undefined = item('placeholder');
    await store.transaction(async (tx) => {
      await tx.insert(item('pending'));
      seenInside = await tx.get(item('pending'));
      seenOutside = await store.get(item('pending'));
    });
    assert.ok(seenInside);
    assert.equal(seenOutside, undefined);
    assert.ok(await store.get(item('pending')));
  });

  test('tags are mirrored for queries and follow updates and deletes', async () => {
    const it = item('tagged', { data: { name: 'tagged', tags: { a: '1', b: true } } });
    await store.transaction((tx) => tx.insert(it));
    const byTag = (key: string, value: string) =>
      store.list({
        ...all('o', 'secret', ''),
        build: (p) => ({ where: `r.id IN (SELECT t.id FROM resource_tags t WHERE t.key = ${p.add(key)} AND t.value = ${p.add(value)})`, orderBy: 'r.name' }),
      });
    assert.deepEqual((await byTag('b', 'true')).map((r) => r.name), ['tagged']);
    await store.transaction((tx) => tx.update({ ...it, version: 2, data: { name: 'tagged', tags: { a: '2' } } }, 1));
    assert.equal((await byTag('b', 'true')).length, 0);
    assert.equal((await byTag('a', '2')).length, 1);
    await store.transaction((tx) => tx.delete(it));
    assert.equal((await byTag('a', '2')).length, 0);
    assert.equal(await store.get(it), undefined);
  });

  test('status writes change the body but not version or lastModified', async () => {
    const it = item('status');
    await store.transaction((tx) => tx.insert(it));
    await store.transaction((tx) => tx.writeStatus(it, { ...it.data, status: { ready: true } }));
    const stored = await store.get(it);
    assert.deepEqual(stored!.data.status, { ready: true });
    assert.equal(stored!.version, 1);
    assert.equal(stored!.lastModified, it.lastModified);
  });

  test('tryLock: a transaction-scoped lock that another transaction cannot take until the first ends', async () => {
    assert.equal(await store.transaction((tx) => tx.tryLock('reconcile:o/volumeset/g/v')), true);
    if (backend !== 'postgres') return; // SQLite serializes transactions: there is never another holder
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let taken!: () => void;
    const isTaken = new Promise<void>((resolve) => (taken = resolve));
    const first = store.transaction(async (tx) => {
      assert.equal(await tx.tryLock('reconcile:busy'), true);
      taken();
      await held;
    });
    await isTaken;
    assert.equal(await store.transaction((tx) => tx.tryLock('reconcile:busy')), false);
    assert.equal(await store.transaction((tx) => tx.tryLock('reconcile:other')), true);
    release();
    await first;
    assert.equal(await store.transaction((tx) => tx.tryLock('reconcile:busy')), true);
  });

  test('lists honour scope, order and limit', async () => {
    await store.transaction(async (tx) => {
      for (const n of ['c', 'a', 'b']) await tx.insert(item(n, { org: 'listing', kind: 'group' }));
    });
    assert.deepEqual((await store.list(all('listing', 'group', ''))).map((r) => r.name), ['a', 'b', 'c']);
    assert.deepEqual((await store.list({ ...all('listing', 'group', ''), limit: 2 })).map((r) => r.name), ['a', 'b']);
  });

  test('service account keys are stored as records and revoked by owner', async () => {
    const now = new Date().toISOString();
    await store.transaction(async (tx) => {
      await tx.putKey({ keyName: 'k1', org: 'o', serviceAccount: 'sa', secretHash: 'h1', created: now });
      await tx.putKey({ keyName: 'k2', org: 'o', serviceAccount: 'sa', secretHash: 'h2', created: now });
    });
    assert.equal((await store.findKey('k1'))!.secretHash, 'h1');
    await store.transaction((tx) => tx.deleteKeys('o', 'sa', ['k2']));
    assert.equal(await store.findKey('k1'), undefined);
    assert.ok(await store.findKey('k2'));
    await store.transaction((tx) => tx.deleteKeys('o', 'sa', []));
    assert.equal(await store.findKey('k2'), undefined);
  });

  test('concurrent version-checked updates: exactly one of two racing writers wins', async () => {
    const it = item('race');
    await store.transaction((tx) => tx.insert(it));
    const attempt = (label: string) => store.transaction((tx) => tx.update({ ...it, version: 2, data: { name: 'race', description: label } }, 1));
    const results = await Promise.allSettled([attempt('x'), attempt('y')]);
    assert.equal(results.filter((r) => r.status === 'fulfilled').length, 1);
    assert.equal((await store.get(it))!.version, 2);
  });

  // Read-modify-write transactions: PostgreSQL runs them optimistically first and falls back to
  // locking; whichever path runs, every change and its event land exactly once.
  const event = (org: string, name: string, n: number, extra: Partial<NewAuditEvent> = {}): NewAuditEvent =>
    auditEvent(
      { org, id: randomUUID(), context: 'cpln', eventTime: new Date().toISOString(), resourceType: 'secret', resourceName: name, resourceId: name, subjectName: 'test', actionType: 'edit', ...extra },
      { n },
    );
  const increment = (tx: Tx, current: StoredItem, extra: Record<string, unknown> = {}) =>
    tx.update({ ...current, version: current.version + 1, data: { ...current.data, ...extra, n: Number(current.data.n ?? 0) + 1 } }, current.version);

  test('racing read-modify-write transactions lose no update and write one event each', async () => {
    const it = item('counter', { org: 'rmw' });
    await store.transaction((tx) => tx.insert(it));
    await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        store.transaction(async (tx) => {
          const current = (await tx.get(it, 'update'))!;
          await increment(tx, current);
          await tx.appendAudit(event('rmw', 'counter', i));
        }),
      ),
    );
    const stored = (await store.get(it))!;
    assert.equal(stored.data.n, 12);
    assert.equal(stored.version, 13);
    assert.equal((await store.audit({ org: 'rmw', limit: 100 })).length, 12);
  });

  test('once chained, a transaction\'s events carry the seq they were chained at', async () => {
    const appended = Array.from({ length: 8 }, (_, n) => event('placed', `r${n}`, n));
    // Concurrent transactions, two of them appending two events each (the array path on PostgreSQL).
    await Promise.all([
      ...appended.slice(0, 4).map((e) => store.transaction((tx) => tx.appendAudit(e))),
      store.transaction(async (tx) => {
        await tx.appendAudit(appended[4]);
        await tx.appendAudit(appended[5]);
      }),
      store.transaction(async (tx) => {
        await tx.appendAudit(appended[6]);
        await tx.appendAudit(appended[7]);
      }),
    ]);
    await store.chained(appended);
    const stored = new Map((await store.audit({ org: 'placed', limit: 100 })).map((e) => [e.id, e.seq]));
    assert.deepEqual(appended.map((e) => e.seq), appended.map((e) => stored.get(e.id)));
    assert.deepEqual([...stored.values()].sort((a, b) => a - b), [1, 2, 3, 4, 5, 6, 7, 8]);
  });

  test('audit filters by resource and time see every appended event, before and after pruning by age', async () => {
    const at = (day: number) => `2020-01-0${day}T00:00:00.000Z`;
    const append = (n: number, resourceId: string) =>
      store.transaction((tx) => tx.appendAudit(event('aged', resourceId, n, { resourceId, eventTime: at(n) })));
    for (let n = 1; n <= 6; n++) await append(n, n % 2 ? 'odd' : 'even');
    const seqs = async (filter: Partial<AuditFilter>) => (await store.audit({ org: 'aged', limit: 100, ...filter })).map((e) => e.seq);
    assert.deepEqual(await seqs({ resourceId: 'odd' }), [1, 3, 5]);
    assert.deepEqual(await seqs({ from: at(2), to: at(4) }), [2, 3, 4]);
    assert.deepEqual(await seqs({ from: at(5) }), [5, 6]);
    assert.deepEqual(await seqs({ to: at(1) }), [1]);
    assert.equal(await store.pruneAudit('aged', { before: at(4) }), 3);
    assert.deepEqual(await seqs({ resourceId: 'odd' }), [5]);
    assert.deepEqual(await seqs({ to: at(5) }), [4, 5]);
    await append(7, 'odd');
    assert.deepEqual(await seqs({ resourceId: 'odd', from: at(5) }), [5, 7]);
    assert.deepEqual(await verifyChain(store, 'aged'), { ok: true, events: 4, from: 4, to: 7, restores: [] });
  });

  test('an event appended by a transaction that then fails takes no place in the chain', async () => {
    const outcomes = await Promise.allSettled([
      store.transaction((tx) => tx.appendAudit(event('undone', 'x', 1))),
      store.transaction(async (tx) => {
        await tx.appendAudit(event('undone', 'x', 2));
        throw new Error('changed its mind');
      }),
      store.transaction((tx) => tx.appendAudit(event('undone', 'x', 3))),
    ]);
    assert.deepEqual(outcomes.map((o) => o.status), ['fulfilled', 'rejected', 'fulfilled']);
    // Concurrent transactions: their events may take either order.
    const bodies = (await store.audit({ org: 'undone', limit: 10 })).map((e) => JSON.parse(e.body).n as number);
    assert.deepEqual(bodies.sort(), [1, 3]);
    assert.deepEqual(await verifyChain(store, 'undone'), { ok: true, events: 2, from: 1, to: 2, restores: [] });
    assert.equal((await store.auditHead('undone')).seq, 2);
  });

  test('events with any text in their bodies, appended concurrently, form one chain that verifies', async () => {
    const texts = ['plain', 'é à ü', '日本語', '🚀 emoji', 'line\nbreak', 'back\\slash "quoted"', ''];
    await Promise.all(texts.map((text, n) => store.transaction((tx) => tx.appendAudit({ ...event('unicode', 'u', n), body: JSON.stringify({ n, text }) }))));
    const report = await verifyChain(store, 'unicode');
    assert.deepEqual(report, { ok: true, events: texts.length, from: 1, to: texts.length, restores: [] });
    const bodies = (await store.audit({ org: 'unicode', limit: 100 })).map((e) => JSON.parse(e.body).text).sort();
    assert.deepEqual(bodies, [...texts].sort());
  });

  test('a change applies to the item as another process left it, whatever this process wrote of it before', async () => {
    const it = item('shared', { org: 'two' });
    await store.transaction((tx) => tx.insert(it));
    const change = (on: Store, extra: Record<string, unknown>, precondition?: number) =>
      on.transaction(async (tx) => {
        const current = (await tx.get(it, 'update'))!;
        if (precondition !== undefined && current.version !== precondition) throw new Error(`at version ${current.version}, not ${precondition}`);
        await tx.update({ ...current, version: current.version + 1, data: { ...current.data, ...extra } }, current.version);
      });
    await change(store, { here: 1 });
    const other = await another();
    try {
      await change(other, { there: 1 });
      // A client that saw version 3 (from the other process) is not refused here as stale.
      await change(store, { again: 1 }, 3);
      const final = (await store.get(it))!;
      assert.equal(final.version, 4);
      assert.deepEqual([final.data.here, final.data.there, final.data.again], [1, 1, 1]);
      // "Already so, nothing to write" is decided on the item as it is now, not as this process last wrote it.
      await change(other, { again: 2 });
      await store.transaction(async (tx) => {
        const current = (await tx.get(it, 'update'))!;
        if (current.data.again !== 1) await tx.update({ ...current, version: current.version + 1, data: { ...current.data, again: 1 } }, current.version);
      });
      assert.deepEqual([(await store.get(it))!.data.again, (await store.get(it))!.version], [1, 6]);
    } finally {
      await other.close();
    }
  });

  test('a status write that lands between a change\'s read and its write is kept', { skip: backend === 'sqlite' && 'SQLite runs one transaction at a time' }, async () => {
    const it = item('status', { org: 'race' });
    await store.transaction((tx) => tx.insert(it));
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const change = store.transaction(async (tx) => {
      const current = (await tx.get(it, 'update'))!;
      await gate;
      await tx.update({ ...current, version: current.version + 1, data: { ...current.data, description: 'edited' } }, current.version);
    });
    const other = await another();
    try {
      await other.transaction((tx) => tx.writeStatus(it, { ...it.data, status: { ready: true } }));
    } finally {
      await other.close();
    }
    release();
    await change;
    const final = (await store.get(it))!;
    assert.deepEqual([final.data.description, final.data.status, final.version], ['edited', { ready: true }, 2]);
  });

  test('a transaction that reads an item for update without writing it, beside a write, applies the write once', async () => {
    const a = item('held', { org: 'held' });
    const b = item('written', { org: 'held' });
    await store.transaction(async (tx) => {
      await tx.insert(a);
      await tx.insert(b);
    });
    let runs = 0;
    await store.transaction(async (tx) => {
      runs++;
      await tx.get(a, 'update');
      await increment(tx, (await tx.get(b, 'update'))!);
      await tx.appendAudit(event('held', 'written', 1));
    });
    assert.ok(runs >= 1 && runs <= 2, `ran ${runs} times: at most one optimistic attempt before the locking run`);
    assert.equal((await store.get(b))!.version, 2);
    assert.equal((await store.get(b))!.data.n, 1);
    assert.equal((await store.get(a))!.version, 1);
    assert.equal((await store.audit({ org: 'held', limit: 100 })).length, 1);
  });

  test('a transaction that ignores the outcome of one of its writes still makes all of them', async () => {
    const a = item('first', { org: 'lenient' });
    await store.transaction((tx) => tx.insert(a));
    const b = item('second', { org: 'lenient' });
    await store.transaction(async (tx) => {
      await increment(tx, (await tx.get(a, 'update'))!);
      await tx.insert(b).catch(() => {}); // as if an existing item were fine
      await tx.appendAudit(event('lenient', 'first', 1));
    });
    assert.equal((await store.get(a))!.data.n, 1);
    assert.deepEqual(await store.get(b), b);
    assert.equal((await store.audit({ org: 'lenient', limit: 100 })).length, 1);
  });

  test('log lines page in both directions: each page goes on after the last line of the one before, ties in time broken by id', async () => {
    // Two lines share each time, so a page may end between them.
    const lines = Array.from({ length: 9 }, (_, i) => ({ org: 'paging', ts: String(1_700_000_000_000_000_000n + BigInt(i >> 1)), labels: { gvc: 'g' }, line: `line ${i}` }));
    await store.transaction((tx) => tx.appendLogs(lines));
    for (const backward of [false, true]) {
      const seen: string[] = [];
      let after: { ts: string; id: number } | undefined;
      for (;;) {
        const page = await store.logs({ org: 'paging', from: '0', to: '9999999999999999999', backward, labels: [{ label: 'gvc', op: '=', value: 'g' }], contains: [], after, limit: 2 });
        seen.push(...page.map((l) => l.line));
        if (page.length < 2) break;
        after = page[page.length - 1];
      }
      const expected = lines.map((l) => l.line);
      assert.deepEqual(seen, backward ? expected.reverse() : expected);
    }
  });

  test('getAt and listAt name the chain position of what they read: 0 before any event, the head after, an empty list too', async () => {
    const org = 'positions';
    const a = item('a', { org, kind: 'group' });
    assert.deepEqual(await store.getAt(a), { value: undefined, seq: 0 });
    assert.deepEqual(await store.listAt(all(org, 'group', '')), { value: [], seq: 0 });
    await store.transaction(async (tx) => {
      await tx.insert(a);
      await tx.appendAudit(event(org, 'a', 1));
    });
    await store.transaction(async (tx) => {
      for (const n of ['c', 'b']) await tx.insert(item(n, { org, kind: 'group' }));
      await tx.appendAudit(event(org, 'b', 1));
      await tx.appendAudit(event(org, 'c', 1));
    });
    assert.deepEqual(await store.getAt(a), { value: a, seq: 3 });
    const listed = await store.listAt({ ...all(org, 'group', ''), limit: 2 });
    assert.deepEqual([listed.value.map((r) => r.name), listed.seq], [['a', 'b'], 3], 'in the list order, limited');
    assert.deepEqual(await store.listAt(all(org, 'workload', 'none')), { value: [], seq: 3 });
    assert.deepEqual(await store.getAt({ ...a, name: 'missing' }), { value: undefined, seq: 3 });
  });

  test('the position of a read racing writers (from two stores) covers exactly the changes it shows', async () => {
    const org = 'racing-positions';
    const names = ['r0', 'r1', 'r2'];
    await store.transaction(async (tx) => {
      for (const name of names) await tx.insert(item(name, { org, kind: 'group' }));
    });
    const other = await another();
    const reads: Array<{ seq: number; versions: Map<string, number> }> = [];
    let writing = true;
    // Each change moves one item to its next version and appends one event naming the item.
    const writer = async (on: Store, w: number) => {
      for (let i = 0; i < 40; i++) {
        const name = names[(i + w) % names.length];
        await on.transaction(async (tx) => {
          const current = (await tx.get({ org, kind: 'group', gvc: '', name }, 'update'))!;
          await increment(tx, current);
          await tx.appendAudit(event(org, name, current.version + 1));
        });
      }
    };
    const reader = async () => {
      for (let i = 0; writing; i++) {
        // A cached SQLite read resolves at once: the writers' turns come between reads.
        await new Promise((resolve) => setImmediate(resolve));
        if (i % 2 === 0) {
          const { value, seq } = await store.listAt(all(org, 'group', ''));
          reads.push({ seq, versions: new Map(value.map((r) => [r.name, r.version])) });
        } else {
          const { value, seq } = await store.getAt({ org, kind: 'group', gvc: '', name: names[i % names.length] });
          reads.push({ seq, versions: new Map([[value!.name, value!.version]]) });
        }
      }
    };
    const readers = [reader(), reader()];
    await Promise.all([writer(store, 0), writer(store, 1), writer(other, 2)]);
    writing = false;
    await Promise.all(readers);
    await other.close();
    const events = await store.audit({ org, limit: 1000 });
    assert.equal(events.length, 120);
    assert.ok(reads.length > 10, `only ${reads.length} reads raced the writers`);
    for (const read of reads) {
      for (const [name, version] of read.versions) {
        const changes = events.filter((e) => e.seq <= read.seq && e.resourceName === name).length;
        assert.equal(version, 1 + changes, `${name} read at version ${version} with position ${read.seq}, which covers ${changes} of its changes`);
      }
    }
  });
});
