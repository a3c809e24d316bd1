// Two Keel processes on one database, each answering GETs from its read cache on PostgreSQL: a
// write acknowledged by either is seen by every GET that starts after it, on either; a cut
// connection or a gap in the change feed makes reads go to the database, never answer stale; the
// cache stays within its bound. On SQLite (one process's store) the same reads go through one process.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { buildApp, type App } from '../../src/server/app.js';
import { openStore } from '../../src/store/open.js';
import type { PostgresStore } from '../../src/store/postgres/store.js';
import type { Store } from '../../src/store/types.js';
import { Cpln } from '../support/cpln.js';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { rawExec } from '../support/raw-sql.js';

interface Answer {
  status: number;
  body: any;
  seq?: string;
}

const caller = (k: TestKeel) => async (app: App, method: string, url: string, body?: unknown): Promise<Answer> => {
  const res = await app.core.inject({ method: method as 'GET', url, headers: { authorization: `Bearer ${k.token}`, 'content-type': 'application/json' }, payload: body === undefined ? undefined : JSON.stringify(body) });
  return { status: res.statusCode, body: res.body ? JSON.parse(res.body) : undefined, seq: res.headers['keel-seq'] as string | undefined };
};

forEachBackend('GETs through two processes see every acknowledged write', (backend) => {
  let k: TestKeel;
  let second: App;
  let call: ReturnType<typeof caller>;
  before(async () => {
    k = await startKeel(backend);
    // SQLite's store is one process's: there the "other process" is the same one.
    second = backend === 'postgres' ? (await k.reopen()).app : k.app;
    call = caller(k);
  });
  after(() => k.close());

  test('a create, a change and a delete through one process are seen at once through the other, with a position that covers them', async () => {
    assert.equal((await call(second, 'GET', '/org/acme/group/seen')).status, 404);
    const created = await call(k.app, 'POST', '/org/acme/group', { name: 'seen', description: 'one' });
    assert.equal(created.status, 201);
    const first = await call(second, 'GET', '/org/acme/group/seen');
    assert.equal(first.status, 200, 'a name known absent is not remembered past its create');
    assert.equal(first.body.description, 'one');
    for (let i = 2; i <= 6; i++) {
      assert.equal((await call(second, 'GET', '/org/acme/group/seen')).body.description, `${i === 2 ? 'one' : i - 1}`);
      assert.equal((await call(k.app, 'PATCH', '/org/acme/group/seen', { description: String(i) })).status, 200);
      const read = await call(second, 'GET', '/org/acme/group/seen');
      assert.equal(read.body.description, String(i));
      assert.equal(read.body.version, i);
      // The position names a state holding this change: a watch from it does not deliver it again.
      const events = await k.store.audit({ org: 'acme', resourceName: 'seen', limit: 100 });
      assert.ok(Number(read.seq) >= events[events.length - 1].seq!, `Keel-Seq ${read.seq} is before the change's event ${events[events.length - 1].seq}`);
    }
    assert.equal((await call(k.app, 'DELETE', '/org/acme/group/seen')).status, 202);
    assert.equal((await call(second, 'GET', '/org/acme/group/seen')).status, 404, 'a delete is seen at once');
    assert.equal((await call(k.app, 'GET', '/org/acme/group/seen')).status, 404);
  });

  test('an audit event written through one process, changing no item: a GET through the other names a position that covers it', async () => {
    assert.equal((await call(k.app, 'POST', '/org/acme/group', { name: 'still' })).status, 201);
    assert.equal((await call(k.app, 'POST', '/org/acme/auditctx', { name: 'app-events' })).status, 201);
    // Read once so the item and the org's head are held.
    assert.equal((await call(second, 'GET', '/org/acme/group/still')).status, 200);
    for (let i = 0; i < 3; i++) {
      const posted = await k.app.audit.inject({
        method: 'POST',
        url: '/audit/org/acme/auditctx/app-events',
        headers: { authorization: `Bearer ${k.token}`, 'content-type': 'application/json' },
        payload: JSON.stringify({ resource: { type: 'invoice', name: `inv-${i}` }, action: { type: 'approve' } }),
      });
      assert.equal(posted.statusCode, 201, posted.body);
      const [event] = await k.store.audit({ org: 'acme', newestFirst: true, limit: 1 });
      const read = await call(second, 'GET', '/org/acme/group/still');
      assert.equal(read.status, 200);
      assert.ok(Number(read.seq) >= event.seq!, `Keel-Seq ${read.seq} is before the event ${event.seq}, acknowledged before the GET began`);
    }
  });

  test("an item's history and a secret's revealed value through the other process show every acknowledged write", async () => {
    assert.equal((await call(k.app, 'POST', '/org/acme/secret', { name: 'pass', type: 'opaque', data: { payload: 'v1', encoding: 'plain' } })).status, 201);
    for (let i = 2; i <= 5; i++) {
      // Both read first, so what the other process holds is the state before the write.
      assert.equal((await call(second, 'GET', '/org/acme/secret/pass/-reveal')).body.data.payload, `v${i - 1}`);
      assert.equal((await call(second, 'GET', '/org/acme/secret/pass/-history')).body.items.length, i - 1);
      const changed = await call(i % 2 ? second : k.app, 'PATCH', '/org/acme/secret/pass', { data: { payload: `v${i}`, encoding: 'plain' } });
      assert.equal(changed.status, 200, JSON.stringify(changed.body));
      for (const app of [second, k.app]) {
        const revealed = await call(app, 'GET', '/org/acme/secret/pass/-reveal');
        assert.equal(revealed.body.data.payload, `v${i}`, 'the revealed value is the last written');
        const history = await call(app, 'GET', '/org/acme/secret/pass/-history');
        assert.equal(history.status, 200, JSON.stringify(history.body));
        assert.deepEqual(history.body.items.map((h: any) => h.version), Array.from({ length: i }, (_, j) => i - j), 'the history holds every acknowledged version');
      }
    }
    assert.equal((await call(k.app, 'DELETE', '/org/acme/secret/pass')).status, 202);
    assert.equal((await call(second, 'GET', '/org/acme/secret/pass/-reveal')).status, 404, 'a deleted secret is not revealed');
  });

  test('random writes through both processes, random reads through both: each read shows the last write acknowledged before it began, or a later one', async () => {
    const names = ['f0', 'f1', 'f2', 'f3'];
    const apps = [k.app, second];
    // Per name: op n's kind, the last op acknowledged, the last op begun. Each name has one writer.
    const ops = new Map(names.map((n) => [n, ['delete'] as string[]]));
    const acked = new Map(names.map((n) => [n, 0]));
    const begun = new Map(names.map((n) => [n, 0]));
    const pick = <T>(xs: T[]) => xs[Math.floor(Math.random() * xs.length)];
    let writing = true;
    const writer = async (mine: string[]) => {
      for (let i = 0; i < 40; i++) {
        const name = pick(mine);
        const list = ops.get(name)!;
        const exists = list[list.length - 1] !== 'delete';
        const kind = exists ? pick(['patch', 'patch', 'delete']) : 'create';
        const n = list.length;
        list.push(kind);
        begun.set(name, n);
        const app = pick(apps);
        const res =
          kind === 'create' ? await call(app, 'POST', '/org/acme/group', { name, tags: { g: n } })
          : kind === 'patch' ? await call(app, 'PATCH', `/org/acme/group/${name}`, { tags: { g: n } })
          : await call(app, 'DELETE', `/org/acme/group/${name}`);
        assert.ok(res.status < 300, `${kind} ${name}: ${res.status} ${JSON.stringify(res.body)}`);
        acked.set(name, n);
      }
    };
    let reads = 0;
    const reader = async () => {
      while (writing) {
        // Let the writers' requests in between (inject answers on this thread).
        await new Promise((resolve) => setImmediate(resolve));
        const name = pick(names);
        const floor = acked.get(name)!;
        const res = await call(pick(apps), 'GET', `/org/acme/group/${name}`);
        const ceiling = begun.get(name)!;
        const list = ops.get(name)!;
        reads++;
        if (res.status === 404) {
          const deletes = list.map((kind, i) => (kind === 'delete' && i >= floor && i <= ceiling ? i : -1)).filter((i) => i >= 0);
          assert.ok(deletes.length > 0, `${name}: 404 while op ${floor} (${list[floor]}) was acknowledged and no delete since`);
        } else {
          assert.equal(res.status, 200, JSON.stringify(res.body));
          const g = Number(res.body.tags.g);
          assert.ok(g >= floor && g <= ceiling, `${name}: read op ${g}, but op ${floor} was acknowledged before the read began`);
        }
      }
    };
    const readers = Array.from({ length: 4 }, reader);
    try {
      await Promise.all([writer(names.slice(0, 2)), writer(names.slice(2))]);
    } finally {
      writing = false;
      await Promise.allSettled(readers);
    }
    await Promise.all(readers);
    assert.ok(reads > 40, `only ${reads} reads ran alongside the writes`);
  });

  test('as the cpln CLI does: a group made through one process is got through the other', async () => {
    await k.listen();
    if (!second.core.server.listening) await second.core.listen({ host: '127.0.0.1', port: 0 });
    const endpoints = [k.app, second].map((app) => `http://127.0.0.1:${(app.core.server.address() as AddressInfo).port}`);
    const cpln = new Cpln(endpoints.map((e) => e.replace('http://', '')));
    const run = async (endpoint: string, args: string[]) => {
      const profile = await cpln.run(['profile', 'update', 'keel', '--endpoint', endpoint, '--token', k.token, '--org', 'acme', '--default']);
      assert.equal(profile.code, 0, profile.stderr);
      return cpln.run(args);
    };
    assert.notEqual((await run(endpoints[1], ['group', 'get', 'by-cli', '-o', 'json'])).code, 0);
    const made = await run(endpoints[0], ['group', 'create', '--name', 'by-cli', '--description', 'first']);
    assert.equal(made.code, 0, made.stderr);
    const got = await run(endpoints[1], ['group', 'get', 'by-cli', '-o', 'json']);
    assert.equal(got.code, 0, got.stderr);
    assert.equal(JSON.parse(got.stdout).description, 'first');
    assert.equal((await run(endpoints[0], ['group', 'delete', 'by-cli'])).code, 0);
    assert.notEqual((await run(endpoints[1], ['group', 'get', 'by-cli', '-o', 'json'])).code, 0, 'the delete is seen through the other process');
  });
});

/** Calls as `token` (a service account's key). */
const as = (app: App, token: string, method: string, url: string, body?: unknown) =>
  app.core.inject({ method: method as 'GET', url, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, payload: body === undefined ? undefined : JSON.stringify(body) }).then((res) => ({ status: res.statusCode, body: res.body ? JSON.parse(res.body) : undefined }));

// Authentication and authorization decide from the state at the request's arrival or later, on
// every process: a key revoked, a grant removed or added, a member dropped from a group, an org
// deleted through one process is honoured by the other's very next request. On SQLite (one
// process's store) both "processes" are the same one.
forEachBackend('keys and policies changed through one process are honoured at once by the other', (backend) => {
  let k: TestKeel;
  let second: App;
  let call: ReturnType<typeof caller>;
  /** Key of a service account whose only access to gvc `gx` comes from the policy or the group under test. */
  let key: string;
  const sa = async (name: string) => {
    assert.equal((await call(k.app, 'POST', '/org/acme/serviceaccount', { name })).status, 201);
    const made = await call(k.app, 'POST', `/org/acme/serviceaccount/${name}/-addKey`, { description: 'test' });
    assert.equal(made.status, 200, JSON.stringify(made.body));
    return made.body.key as string;
  };
  before(async () => {
    k = await startKeel(backend, 'acme', { allowSandboxes: true });
    second = backend === 'postgres' ? (await k.reopen()).app : k.app;
    call = caller(k);
    assert.equal((await call(k.app, 'POST', '/org/acme/gvc', { name: 'gx' })).status, 201);
    key = await sa('reader');
  });
  after(() => k.close());

  /** Reads gx through the second process a few times (its decisions are then held), answering `status` each time. */
  const held = async (token: string, status: number) => {
    for (let i = 0; i < 3; i++) assert.equal((await as(second, token, 'GET', '/org/acme/gvc/gx')).status, status);
  };

  test('a grant added is honoured at once, a grant removed refused at once', async () => {
    await held(key, 403);
    const policy = { name: 'direct', targetKind: 'gvc', targetLinks: ['//gvc/gx'], bindings: [{ permissions: ['view'], principalLinks: ['//serviceaccount/reader'] }] };
    assert.equal((await call(k.app, 'POST', '/org/acme/policy', policy)).status, 201);
    await held(key, 200);
    assert.equal((await call(k.app, 'PATCH', '/org/acme/policy/direct', { bindings: [] })).status, 200);
    await held(key, 403);
    assert.equal((await call(k.app, 'PATCH', '/org/acme/policy/direct', { bindings: policy.bindings })).status, 200);
    await held(key, 200);
    assert.equal((await call(k.app, 'DELETE', '/org/acme/policy/direct')).status, 202);
    await held(key, 403);
  });

  test('a member dropped from a group loses what the group was granted at once', async () => {
    assert.equal((await call(k.app, 'POST', '/org/acme/group', { name: 'gx-viewers', memberLinks: ['/org/acme/serviceaccount/reader'] })).status, 201);
    assert.equal((await call(k.app, 'POST', '/org/acme/policy', { name: 'via-group', targetKind: 'gvc', target: 'all', bindings: [{ permissions: ['view'], principalLinks: ['//group/gx-viewers'] }] })).status, 201);
    await held(key, 200);
    assert.equal((await call(k.app, 'PATCH', '/org/acme/group/gx-viewers', { '$drop/memberLinks': ['/org/acme/serviceaccount/reader'] })).status, 200);
    await held(key, 403);
    assert.equal((await call(k.app, 'PATCH', '/org/acme/group/gx-viewers', { '$append/memberLinks': ['/org/acme/serviceaccount/reader'] })).status, 200);
    await held(key, 200);
    assert.equal((await call(k.app, 'DELETE', '/org/acme/group/gx-viewers')).status, 202);
    await held(key, 403);
    assert.equal((await call(k.app, 'DELETE', '/org/acme/policy/via-group')).status, 202);
  });

  test('a key revoked, or its service account deleted, is refused at once', async () => {
    assert.equal((await call(k.app, 'POST', '/org/acme/policy', { name: 'revoked', targetKind: 'gvc', target: 'all', bindings: [{ permissions: ['view'], principalLinks: ['//serviceaccount/short', '//serviceaccount/doomed'] }] })).status, 201);
    const short = await sa('short');
    await held(short, 200);
    assert.equal((await call(k.app, 'PATCH', '/org/acme/serviceaccount/short', { '$drop/keys': [short.split('.')[0]] })).status, 200);
    await held(short, 401);
    const doomed = await sa('doomed');
    await held(doomed, 200);
    assert.equal((await call(k.app, 'DELETE', '/org/acme/serviceaccount/doomed')).status, 202);
    await held(doomed, 401);
  });

  test("an org deleted through one process: its keys are refused at once through the other", async () => {
    const box = await call(k.app, 'POST', '/-admin/sandboxes', { ttlSeconds: 600, seed: [{ kind: 'gvc', name: 'play' }] });
    assert.equal(box.status, 201, JSON.stringify(box.body));
    const { org, key: boxKey } = box.body as { org: string; key: string };
    for (let i = 0; i < 3; i++) assert.equal((await as(second, boxKey, 'GET', `/org/${org}/gvc/play`)).status, 200);
    assert.equal((await call(k.app, 'DELETE', `/-admin/sandboxes/${org}`)).status, 202);
    const after = await as(second, boxKey, 'GET', `/org/${org}/gvc/play`);
    assert.equal(after.status, 401, JSON.stringify(after.body));
  });
});

forEachBackend('lists and queries through two processes see every acknowledged write, exactly as the database answers them', () => {
  let k: TestKeel;
  let second: { app: App; store: Store };
  /** A third process with the read cache off: every list it answers is the SQL path's. */
  let plain: { app: App; store: Store };
  let viewer: string;
  const as = (token: string) => async (app: App, method: string, url: string, body?: unknown): Promise<Answer> => {
    const res = await app.core.inject({ method: method as 'GET', url, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, payload: body === undefined ? undefined : JSON.stringify(body) });
    return { status: res.statusCode, body: res.body ? JSON.parse(res.body) : undefined, seq: res.headers['keel-seq'] as string | undefined };
  };
  let admin: ReturnType<typeof as>;
  const made = async (res: Promise<Answer>, status = 201) => {
    const r = await res;
    assert.equal(r.status, status, JSON.stringify(r.body));
    return r.body;
  };
  /** Every page of a list or query, following its next links: each page's status, items, links and position. */
  const pages = async (call: ReturnType<typeof as>, app: App, method: string, url: string, body?: unknown) => {
    const out: Array<{ status: number; body: unknown; seq?: string }> = [];
    let next: string | undefined = url;
    let first = true;
    while (next !== undefined) {
      assert.ok(out.length < 60, 'pagination does not advance');
      const res: Answer = await call(app, first ? method : 'GET', next, first ? body : undefined);
      first = false;
      out.push({ status: res.status, body: res.body, seq: res.seq });
      next = res.status === 200 ? res.body.links.find((l: { rel: string }) => l.rel === 'next')?.href : undefined;
    }
    return out;
  };
  const names = (res: Answer) => res.body.items.map((i: { name: string }) => i.name);

  before(async () => {
    k = await startKeel('postgres');
    admin = as(k.token);
    // The restricted caller and its policies come first: no process has yet loaded the org's access.
    await made(admin(k.app, 'POST', '/org/acme/serviceaccount', { name: 'viewer' }));
    viewer = (await made(admin(k.app, 'POST', '/org/acme/serviceaccount/viewer/-addKey', { description: 'v' }), 200)).key;
    const bind = [{ permissions: ['view'], principalLinks: ['//serviceaccount/viewer'] }];
    await made(admin(k.app, 'POST', '/org/acme/policy', { name: 'v-named', targetKind: 'group', targetLinks: ['//group/n1', '//group/n4', '//group/n9', '//group/absent'], bindings: bind }));
    await made(admin(k.app, 'POST', '/org/acme/policy', { name: 'v-blue', targetKind: 'group', targetQuery: { spec: { match: 'all', terms: [{ op: '=', tag: 'team', value: 'blue' }] } }, bindings: bind }));
    await made(admin(k.app, 'POST', '/org/acme/policy', { name: 'v-ident', targetKind: 'identity', targetLinks: ['//gvc/g1/identity/n2'], targetQuery: { spec: { match: 'any', terms: [{ op: '>', tag: 'n', value: '5' }, { op: '~', property: 'description', value: 'x' }] } }, bindings: bind }));
    await made(admin(k.app, 'POST', '/org/acme/policy', { name: 'v-gvc', targetKind: 'gvc', target: 'all', bindings: bind }));
    for (const gvc of ['g1', 'g2']) await made(admin(k.app, 'POST', '/org/acme/gvc', { name: gvc }));
    second = await k.reopen();
    plain = await k.reopen({ readCacheMb: 0 });
  });
  after(() => k.close());

  test('a create, a tag change and a delete through one process are seen at once by lists and queries through the other, answered from its cache', async () => {
    const byTeam = (team: string) => ({ spec: { terms: [{ op: '=', tag: 'team', value: team }] } });
    assert.ok(!names(await admin(second.app, 'GET', '/org/acme/group?limit=100')).includes('ryw'));
    assert.deepEqual(names(await admin(second.app, 'POST', '/org/acme/group/-query', byTeam('red'))), []);
    await made(admin(k.app, 'POST', '/org/acme/group', { name: 'ryw', tags: { team: 'red' } }));
    const listed = await admin(second.app, 'GET', '/org/acme/group?limit=100');
    assert.ok(names(listed).includes('ryw'), 'a create is listed at once');
    const events = await k.store.audit({ org: 'acme', resourceName: 'ryw', limit: 100 });
    assert.ok(Number(listed.seq) >= events[events.length - 1].seq!, `Keel-Seq ${listed.seq} is before the create's event`);
    assert.deepEqual(names(await admin(second.app, 'POST', '/org/acme/group/-query', byTeam('red'))), ['ryw']);
    await made(admin(k.app, 'PATCH', '/org/acme/group/ryw', { tags: { team: 'blue' } }), 200);
    assert.deepEqual(names(await admin(second.app, 'POST', '/org/acme/group/-query', byTeam('red'))), [], 'a tag change leaves the old tag\'s query at once');
    assert.deepEqual(names(await admin(second.app, 'POST', '/org/acme/group/-query', byTeam('blue'))), ['ryw']);
    // The restricted caller sees it through the targetQuery policy, and loses it with the tag.
    assert.ok(names(await as(viewer)(second.app, 'GET', '/org/acme/group')).includes('ryw'));
    await made(admin(second.app, 'PATCH', '/org/acme/group/ryw', { tags: { team: 'green' } }), 200);
    assert.ok(!names(await as(viewer)(k.app, 'GET', '/org/acme/group')).includes('ryw'), 'a tag change takes an item out of a targetQuery policy\'s view at once');
    await made(admin(k.app, 'DELETE', '/org/acme/group/ryw'), 202);
    assert.ok(!names(await admin(second.app, 'GET', '/org/acme/group?limit=100')).includes('ryw'), 'a delete is seen by lists at once');
    assert.deepEqual(names(await admin(second.app, 'POST', '/org/acme/group/-query', { spec: { terms: [{ op: 'exists', tag: 'team' }] } })), []);
    assert.ok((second.store as PostgresStore).cache.usage.scopes > 0, 'the lists were answered from the cache');
    assert.equal((plain.store as PostgresStore).cache.usage.entries, 0);
  });

  test('random writes through both processes; after each, random lists and queries as an admin and as a restricted caller, page by page: the cached processes answer exactly as the uncached one', async () => {
    const pick = <T>(xs: readonly T[]) => xs[Math.floor(Math.random() * xs.length)];
    const maybe = (p: number) => Math.random() < p;
    const NAMES = Array.from({ length: 14 }, (_, i) => `n${i}`);
    const TEXT = ['x', 'X-ray', 'alpha', 'beta', 'é', '10', '9', ''];
    const NUMBERS = ['3', '10', '-1.5', '5', 'x', '2025-01-01T00:00:00Z'];
    const tagsOf = () => {
      const tags: Record<string, unknown> = {};
      if (maybe(0.7)) tags.team = pick(['blue', 'red', 'green']);
      if (maybe(0.6)) tags.n = maybe(0.7) ? pick(NUMBERS) : pick([3, 10, 7.5, true]);
      if (maybe(0.2)) tags.other = pick(TEXT);
      return tags;
    };
    const places = [
      { kind: 'group', base: '/org/acme/group' },
      { kind: 'identity', base: '/org/acme/gvc/g1/identity' },
      { kind: 'identity', base: '/org/acme/gvc/g2/identity' },
    ];
    const term = () =>
      pick([
        () => ({ op: pick(['=', '!=', '~', 'exists', '!exists']), tag: 'team', value: pick(['blue', 'red', 'bl', 'BLUE']) }),
        () => ({ op: pick(['>', '<', '>=', '<=', '=']), tag: 'n', value: pick([...NUMBERS, 5, 10]) }),
        () => ({ op: pick(['=', '~', 'exists']), tag: '*', value: pick(['blue', '10', 'x']) }),
        () => ({ op: pick(['~', '=', '>', '!exists']), property: 'description', value: pick(TEXT) }),
        () => ({ op: pick(['>', '<', '~', '!=']), property: 'name', value: pick(['n3', 'n10', '1']) }),
        () => ({ op: pick(['>=', '=', '<']), property: 'version', value: pick([1, 2, 3, '2']) }),
        () => ({ op: pick(['~', '=']), property: '*', value: pick(['blu', 'n1', 'x', '2']) }),
        () => ({ op: pick(['=', '!=', 'exists']), rel: 'gvc', value: pick(['g1', 'g2']) }),
      ])();
    const query = () => {
      const spec: Record<string, unknown> = { match: pick(['all', 'any', 'none']), terms: Array.from({ length: Math.floor(Math.random() * 3) }, term) };
      if (maybe(0.6)) spec.sort = { by: pick(['name', 'description', 'version', 'tags.n', 'tags.team', 'created', 'lastModified', 'id']), order: pick(['asc', 'desc']) };
      return { spec };
    };
    const apps = () => [k.app, second.app];
    let compared = 0;
    for (let round = 0; round < 45; round++) {
      // A write, through either cached process, acknowledged before the reads below begin.
      const place = pick(places);
      const name = pick(NAMES);
      const app = pick(apps());
      const exists = (await admin(app, 'GET', `${place.base}/${name}`)).status === 200;
      const write = !exists ? 'create' : pick(['patch', 'patch', 'delete']);
      if (write === 'create') await made(admin(app, 'POST', place.base, { name, description: pick(TEXT), tags: tagsOf() }));
      else if (write === 'patch') await made(admin(app, 'PATCH', `${place.base}/${name}`, { description: pick(TEXT), tags: { team: maybe(0.3) ? null : pick(['blue', 'red']), n: pick(NUMBERS) } }), 200);
      else await made(admin(app, 'DELETE', `${place.base}/${name}`), 202);
      for (let read = 0; read < 4; read++) {
        const at = pick(places);
        const caller = maybe(0.5) ? admin : as(viewer);
        const limit = 1 + Math.floor(Math.random() * 6);
        const [method, url, body] = maybe(0.3) ? ['GET', `${at.base}?limit=${limit}`, undefined] : ['POST', `${at.base}/-query?limit=${limit}`, query()];
        const expected = await pages(caller, plain.app, method, url, body);
        for (const app of apps()) {
          const got = await pages(caller, app, method, url, body);
          assert.deepEqual(got, expected, `${method} ${url} ${JSON.stringify(body)} as ${caller === admin ? 'admin' : 'viewer'} after a ${write} of ${place.base}/${name}`);
          compared++;
        }
      }
    }
    assert.ok(compared >= 300);
    for (const store of [k.store, second.store]) assert.ok((store as PostgresStore).cache.usage.scopes >= 3, 'the scopes were held');
  });

  test('a scope too large for its share of the bound is listed by the database, with the same answer', async () => {
    const small = await k.reopen({ readCacheMb: 1 });
    // 1 MB: a scope may take a quarter, about 145 items at the least an item is taken to cost.
    for (let i = 0; i < 160; i += 16) {
      await Promise.all(Array.from({ length: 16 }, (_, j) => made(admin(k.app, 'POST', '/org/acme/gvc/g2/identity', { name: `bulk${String(i + j).padStart(3, '0')}`, tags: { team: (i + j) % 3 ? 'red' : 'blue' } }))));
    }
    for (const [method, url, body] of [
      ['GET', '/org/acme/gvc/g2/identity?limit=50', undefined],
      ['POST', '/org/acme/gvc/g2/identity/-query?limit=20', { spec: { terms: [{ op: '=', tag: 'team', value: 'blue' }], sort: { by: 'name', order: 'desc' } } }],
    ] as const) {
      for (const caller of [admin, as(viewer)]) assert.deepEqual(await pages(caller, small.app, method, url, body), await pages(caller, plain.app, method, url, body));
    }
    assert.equal((small.store as PostgresStore).cache.usage.scopes, 0, 'the oversized scope was not held');
    assert.ok((small.store as PostgresStore).cache.usage.bytes <= 1024 * 1024);
  });

  test('a forged or foreign cursor is refused alike from the cache and from the database', async () => {
    // An error's id is its own.
    const answer = async (app: App, url: string) => {
      const { status, body } = await admin(app, 'GET', url);
      return { status, body: status === 200 ? body : { ...body, id: undefined } };
    };
    const forged = [
      Buffer.from(JSON.stringify(['version', 'asc', 3, null, 'x', 'n1', ''])).toString('base64url'),
      Buffer.from(JSON.stringify(['name', 'asc', 0, null, null, 'n5', ''])).toString('base64url'),
      Buffer.from(JSON.stringify(['name', 'desc', 2, 1, null, 'n5', ''])).toString('base64url'),
      'not-a-cursor',
    ];
    for (const cursor of forged) {
      for (const sort of [undefined, { by: 'version', order: 'asc' }]) {
        const token = Buffer.from(JSON.stringify({ query: { spec: sort ? { sort } : {} }, echo: {}, after: cursor, limit: 3 })).toString('base64url');
        const url = `/org/acme/group/-query?next=${token}`;
        const expected = await answer(plain.app, url);
        for (const app of [k.app, second.app]) assert.deepEqual(await answer(app, url), expected, `${cursor} under ${JSON.stringify(sort)}`);
      }
      const expected = await answer(plain.app, `/org/acme/group?limit=2&cursor=${cursor}`);
      assert.deepEqual(await answer(second.app, `/org/acme/group?limit=2&cursor=${cursor}`), expected);
    }
  });
}, ['postgres']);

forEachBackend('the PostgreSQL read cache when its feed is cut or has a gap', () => {
  let k: TestKeel;
  let store: Store;
  let second: App;
  let call: ReturnType<typeof caller>;
  /** The second process's connections carry this name, so only they are cut. */
  const appName = `keel_rc_${randomBytes(4).toString('hex')}`;
  before(async () => {
    k = await startKeel('postgres', 'acme', { allowSnapshots: true });
    const url = new URL(k.config.databaseUrl!);
    url.searchParams.set('application_name', appName);
    // A statement waiting for a lock fails soon (see `locked`).
    url.searchParams.set('options', `${url.searchParams.get('options')} -c lock_timeout=300`);
    store = await openStore({ dataDir: k.config.dataDir, databaseUrl: url.toString(), readCacheMb: 64 });
    second = await buildApp(k.config, store, { logger: false });
    call = caller(k);
  });
  after(async () => {
    await second.core.close();
    await second.audit.close();
    await store.close();
    await k.close();
  });

  const cut = async () => {
    const admin = new pg.Client({ connectionString: k.config.databaseUrl });
    await admin.connect();
    try {
      return (await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [appName])).rowCount ?? 0;
    } finally {
      await admin.end();
    }
  };

  test('after its connections are terminated, the other process never answers from what it held', async () => {
    assert.equal((await call(k.app, 'POST', '/org/acme/group', { name: 'cut', description: '0' })).status, 201);
    for (let i = 1; i <= 5; i++) {
      assert.equal((await call(second, 'GET', '/org/acme/group/cut')).body.description, String(i - 1), 'held before the cut');
      assert.ok((await cut()) > 0, 'the second process had connections to cut');
      assert.equal((await call(k.app, 'PATCH', '/org/acme/group/cut', { description: String(i) })).status, 200);
      // A read may fail while the pool finds its connections dead; one that answers is current.
      let read = await call(second, 'GET', '/org/acme/group/cut');
      for (let tries = 0; read.status >= 500 && tries < 5; tries++) read = await call(second, 'GET', '/org/acme/group/cut');
      assert.equal(read.status, 200, JSON.stringify(read.body));
      assert.equal(read.body.description, String(i), 'no stale read after the cut');
      const listed = await call(second, 'POST', '/org/acme/group/-query', { spec: { terms: [{ op: '=', property: 'description', value: String(i) }] } });
      assert.deepEqual(listed.body.items.map((g: { name: string }) => g.name), ['cut'], 'no stale list after the cut');
      assert.ok((await cut()) > 0);
      assert.equal((await call(k.app, 'PATCH', '/org/acme/group/cut', { description: `${i}b` })).status, 200);
      let again = await call(second, 'POST', '/org/acme/group/-query', { spec: { terms: [{ op: '=', property: 'description', value: String(i) }] } });
      for (let tries = 0; again.status >= 500 && tries < 5; tries++) again = await call(second, 'POST', '/org/acme/group/-query', { spec: { terms: [{ op: '=', property: 'description', value: String(i) }] } });
      assert.equal(again.status, 200, JSON.stringify(again.body));
      assert.deepEqual(again.body.items, [], 'a list held before a cut is not answered from after it');
      assert.equal((await call(k.app, 'PATCH', '/org/acme/group/cut', { description: String(i) })).status, 200);
    }
  });

  /** Reads through the second process, again while it fails (5xx) as its pool finds its connections dead: the first answer counts. */
  const answer = async (token: string, url: string) => {
    let read = await as(second, token, 'GET', url);
    for (let tries = 0; read.status >= 500 && tries < 5; tries++) read = await as(second, token, 'GET', url);
    return read;
  };
  const grantee = async (name: string) => {
    assert.equal((await call(k.app, 'POST', '/org/acme/serviceaccount', { name })).status, 201);
    assert.equal((await call(k.app, 'POST', '/org/acme/policy', { name, targetKind: 'group', target: 'all', bindings: [{ permissions: ['view'], principalLinks: [`//serviceaccount/${name}`] }] })).status, 201);
    return (await call(k.app, 'POST', `/org/acme/serviceaccount/${name}/-addKey`, { description: 'x' })).body.key as string;
  };

  test('after its connections are terminated, a revoked key and a removed grant are refused by the other process', async () => {
    assert.equal((await call(k.app, 'POST', '/org/acme/group', { name: 'cut-auth' })).status, 201);
    const key = await grantee('cut-reader');
    for (let i = 0; i < 3; i++) assert.equal((await as(second, key, 'GET', '/org/acme/group/cut-auth')).status, 200);
    assert.ok((await cut()) > 0);
    assert.equal((await call(k.app, 'PATCH', '/org/acme/policy/cut-reader', { bindings: [] })).status, 200);
    assert.equal((await answer(key, '/org/acme/group/cut-auth')).status, 403, 'the removed grant is not used after the cut');
    assert.equal((await call(k.app, 'PATCH', '/org/acme/policy/cut-reader', { bindings: [{ permissions: ['view'], principalLinks: ['//serviceaccount/cut-reader'] }] })).status, 200);
    assert.equal((await answer(key, '/org/acme/group/cut-auth')).status, 200);
    assert.ok((await cut()) > 0);
    assert.equal((await call(k.app, 'PATCH', '/org/acme/serviceaccount/cut-reader', { '$drop/keys': [key.split('.')[0]] })).status, 200);
    assert.equal((await answer(key, '/org/acme/group/cut-auth')).status, 401, 'the revoked key is refused after the cut');
  });

  /** Runs `fn` while the change feed is locked: the second process's catch-ups fail (lock_timeout), its other reads do not. */
  const locked = async <T>(fn: () => Promise<T>): Promise<T> => {
    const admin = new pg.Client({ connectionString: k.config.databaseUrl });
    await admin.connect();
    try {
      await admin.query('BEGIN');
      await admin.query('LOCK TABLE keel_cache_changes IN ACCESS EXCLUSIVE MODE');
      return await fn();
    } finally {
      await admin.query('ROLLBACK');
      await admin.end();
    }
  };

  test('while its catch-ups fail, keys, decisions and items come from the database, never from what was held', async () => {
    assert.equal((await call(k.app, 'POST', '/org/acme/group', { name: 'unproven', description: 'before' })).status, 201);
    const key = await grantee('unproven-reader');
    for (let i = 0; i < 3; i++) assert.equal((await as(second, key, 'GET', '/org/acme/group/unproven')).body.description, 'before');
    assert.equal((await call(k.app, 'PATCH', '/org/acme/group/unproven', { description: 'after' })).status, 200);
    assert.equal((await call(k.app, 'PATCH', '/org/acme/policy/unproven-reader', { bindings: [] })).status, 200);
    await locked(async () => {
      // Answered while the feed is locked: the catch-up failed rather than waited.
      assert.equal((await as(second, key, 'GET', '/org/acme/group/unproven')).status, 403, 'the removed grant is not used');
      const read = await as(second, k.token, 'GET', '/org/acme/group/unproven');
      assert.equal(read.status, 200, JSON.stringify(read.body));
      assert.equal(read.body.description, 'after');
    });
    assert.equal((await call(k.app, 'PATCH', '/org/acme/policy/unproven-reader', { bindings: [{ permissions: ['view'], principalLinks: ['//serviceaccount/unproven-reader'] }] })).status, 200);
    assert.equal((await as(second, key, 'GET', '/org/acme/group/unproven')).status, 200);
    assert.equal((await call(k.app, 'PATCH', '/org/acme/serviceaccount/unproven-reader', { '$drop/keys': [key.split('.')[0]] })).status, 200);
    await locked(async () => assert.equal((await as(second, key, 'GET', '/org/acme/group/unproven')).status, 401, 'the revoked key is refused'));
    assert.equal((await as(second, key, 'GET', '/org/acme/group/unproven')).status, 401);
  });

  test('a gap in the change feed (its rows gone) drops what the cache held instead of trusting it', async () => {
    assert.equal((await call(k.app, 'POST', '/org/acme/group', { name: 'gap', description: 'before' })).status, 201);
    assert.equal((await call(second, 'GET', '/org/acme/group/gap')).body.description, 'before');
    assert.equal((await call(k.app, 'PATCH', '/org/acme/group/gap', { description: 'after' })).status, 200);
    // As pruning does to a cache far behind: the change's row is gone, the pruned mark past it.
    await rawExec(k, 'DELETE FROM keel_cache_changes');
    await rawExec(k, 'UPDATE keel_cache_epoch SET pruned = n');
    assert.equal((await call(second, 'GET', '/org/acme/group/gap')).body.description, 'after');
  });

  test('a restore through one process is seen at once through the other', async () => {
    assert.equal((await call(k.app, 'POST', '/org/acme/group', { name: 'restored', description: 'kept' })).status, 201);
    assert.equal((await k.call('POST', '/-admin/snapshots', { name: 'rc-point' })).status, 201);
    assert.equal((await call(k.app, 'PATCH', '/org/acme/group/restored', { description: 'changed' })).status, 200);
    assert.equal((await call(second, 'GET', '/org/acme/group/restored')).body.description, 'changed');
    const restored = await k.call('POST', '/-admin/snapshots/rc-point/-restore');
    assert.ok(restored.status < 300, restored.raw);
    assert.equal((await call(second, 'GET', '/org/acme/group/restored')).body.description, 'kept');
  });

  test('a restore through one process: a key and a grant made after the snapshot are refused at once through the other', async () => {
    assert.equal((await call(k.app, 'POST', '/org/acme/group', { name: 'restored-auth' })).status, 201);
    assert.equal((await k.call('POST', '/-admin/snapshots', { name: 'rc-auth' })).status, 201);
    const key = await grantee('after-snapshot');
    for (let i = 0; i < 3; i++) assert.equal((await as(second, key, 'GET', '/org/acme/group/restored-auth')).status, 200);
    const restored = await k.call('POST', '/-admin/snapshots/rc-auth/-restore');
    assert.ok(restored.status < 300, restored.raw);
    assert.equal((await as(second, key, 'GET', '/org/acme/group/restored-auth')).status, 401);
  });

  test('the cache holds no more than its bound; reads beyond it still answer', async () => {
    const k2 = await startKeel('postgres', 'acme', { readCacheMb: 1 });
    try {
      const call2 = caller(k2);
      const big = Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`t${i}`, 'x'.repeat(1000)]));
      for (let i = 0; i < 30; i++) assert.equal((await call2(k2.app, 'POST', '/org/acme/group', { name: `big${i}`, tags: big })).status, 201);
      for (let round = 0; round < 2; round++) {
        for (let i = 0; i < 30; i++) assert.equal((await call2(k2.app, 'GET', `/org/acme/group/big${i}`)).body.name, `big${i}`);
      }
      const usage = (k2.store as PostgresStore).cache.usage;
      assert.ok(usage.bytes <= 1024 * 1024, `held ${usage.bytes} bytes`);
      assert.ok(usage.entries > 0 && usage.entries < 30, `held ${usage.entries} entries of 30`);
    } finally {
      await k2.close();
    }
  });
}, ['postgres']);
