// POST /org/{org}/{kind}/-query and list pagination over HTTP, as the CLI and the SDKs use them:
// every op, match mode and term type, sort, fetch links, the bodies the CLI sends, errors,
// link-driven paging and the caller's view filter.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { forEachBackend, startKeel, type Response, type TestKeel } from '../support/keel.js';

const FORM = { rawBody: '', headers: { 'content-type': 'application/x-www-form-urlencoded' } };
const PAGED = 130; // identities per GVC in g1 and g2, with the same names: 260 in all

/** `gvc/name` for gvc-scoped items, `name` otherwise, read from the self link the user sees. */
function placeOf(item: any): string {
  const self: string = item.links.find((l: any) => l.rel === 'self').href;
  const m = /^\/org\/[^/]+\/gvc\/([^/]+)\/[^/]+\/([^/]+)$/.exec(self);
  return m ? `${m[1]}/${m[2]}` : self.split('/').pop()!;
}

const ids = (n: number) => Array.from({ length: n }, (_, i) => `id-${String(i).padStart(3, '0')}`);

forEachBackend('query API', (backend) => {
  let k: TestKeel;
  let reader: string; // a service account that may view workloads tagged team=blue only
  const created: Record<string, string> = {}; // workload place -> created

  async function ok(method: string, url: string, body?: unknown, options?: Parameters<TestKeel['call']>[3]): Promise<Response> {
    const res = await k.call(method, url, body, options);
    assert.ok(res.status >= 200 && res.status < 300, `${method} ${url}: ${res.status} ${res.raw}`);
    return res;
  }

  /** The places a query for `kind` with `spec` returns (first page). */
  async function q(kind: string, spec: unknown, options?: Parameters<TestKeel['call']>[3]): Promise<string[]> {
    const res = await ok('POST', `/org/acme/${kind}/-query`, { spec }, options);
    assert.equal(res.body.kind, 'queryresult');
    assert.ok(!res.body.links.some((l: any) => l.rel === 'next'), 'the fixture fits in one page');
    return res.body.items.map(placeOf);
  }

  /** Follows rel next with GET until there is none; returns every page's body. */
  async function follow(first: Response, options: { token?: string; between?: (page: number) => Promise<void> } = {}): Promise<any[]> {
    const pages = [first.body];
    for (;;) {
      const next = pages[pages.length - 1].links.find((l: any) => l.rel === 'next');
      if (!next) return pages;
      if (options.between) await options.between(pages.length);
      const res = await k.call('GET', next.href, undefined, { token: options.token });
      assert.equal(res.status, 200, `GET ${next.href}: ${res.raw}`);
      pages.push(res.body);
      assert.ok(pages.length < 1000, 'paging ends');
    }
  }

  before(async () => {
    k = await startKeel(backend);
    await ok('POST', '/org/acme/gvc', { name: 'g1', description: 'Front Door', tags: { env: 'prod' }, spec: { env: [{ name: 'A', value: '1' }] } });
    await ok('POST', '/org/acme/gvc', { name: 'g2', tags: { env: 'dev' } });
    await ok('POST', '/org/acme/gvc', { name: 'g3' });
    await ok('POST', '/org/acme/gvc/g1/identity', { name: 'ident' });
    const workloads: Array<[string, string, Record<string, string>, Record<string, unknown>?]> = [
      ['g1', 'web', { tier: 'front', team: 'blue' }, { identityLink: '//identity/ident' }],
      ['g1', 'db', { tier: 'back', team: 'red' }],
      ['g2', 'web', { tier: 'front', n: '10', team: 'blue' }],
      ['g2', 'api', { tier: 'Front-End', n: '9' }],
      ['g2', 'job', {}],
    ];
    for (const [gvc, name, tags, extra] of workloads) {
      const res = await ok('POST', `/org/acme/gvc/${gvc}/workload`, { name, tags, spec: { type: 'standard', containers: [{ name: 'c', image: 'nginx' }], ...extra } });
      created[`${gvc}/${name}`] = res.body.created;
    }
    await ok('PATCH', '/org/acme/gvc/g1/workload/db', { description: 'Primary DATABASE' });
    await ok('POST', '/org/acme/gvc/g1/volumeset', { name: 'small', spec: { initialCapacity: 10 } });
    await ok('POST', '/org/acme/gvc/g1/volumeset', { name: 'big', spec: { initialCapacity: 100 } });
    await ok('POST', '/org/acme/gvc/g2/volumeset', { name: 'mid', spec: { initialCapacity: 50 } });
    for (const gvc of ['g1', 'g2']) for (const name of ids(PAGED)) await ok('POST', `/org/acme/gvc/${gvc}/identity`, { name });

    await ok('POST', '/org/acme/serviceaccount', { name: 'reader' });
    reader = (await ok('POST', '/org/acme/serviceaccount/reader/-addKey', { description: 'query test' })).body.key;
    await ok('POST', '/org/acme/policy', {
      name: 'blue-workloads',
      targetKind: 'workload',
      targetQuery: { spec: { match: 'all', terms: [{ op: '=', tag: 'team', value: 'blue' }] } },
      bindings: [{ permissions: ['view'], principalLinks: ['//serviceaccount/reader'] }],
    });
  });
  after(() => k.close());

  test('every op on a tag, with numbers compared as numbers', async () => {
    const t = (op: string, value?: unknown) => q('workload', { terms: [{ op, tag: 'n', ...(value === undefined ? {} : { value }) }] });
    assert.deepEqual(await t('=', '10'), ['g2/web']);
    assert.deepEqual(await t('=', 10), ['g2/web'], 'a number matches the tag text');
    assert.deepEqual(await t('!=', 10), ['g2/api'], '!= needs the tag');
    assert.deepEqual(await t('>', 9), ['g2/web'], '10 > 9 numerically');
    assert.deepEqual(await t('>=', 9), ['g2/api', 'g2/web']);
    assert.deepEqual(await t('<', 10), ['g2/api']);
    assert.deepEqual(await t('<=', 10), ['g2/api', 'g2/web']);
    assert.deepEqual(await t('exists'), ['g2/api', 'g2/web']);
    assert.deepEqual(await t('!exists'), ['g1/db', 'g2/job', 'g1/web']);
    assert.deepEqual(await q('workload', { terms: [{ tag: 'tier', value: 'front' }] }), ['g1/web', 'g2/web'], 'op defaults to =, case-sensitive');
    assert.deepEqual(await q('workload', { terms: [{ op: '~', tag: 'tier', value: 'FRONT' }] }), ['g2/api', 'g1/web', 'g2/web'], '~ is a case-insensitive substring');
  });

  test('tag * means any tag; with ~ it is the CLI fuzzy search', async () => {
    assert.deepEqual(await q('workload', { terms: [{ op: '~', tag: '*', value: 'ED' }] }), ['g1/db'], 'only db has a tag value containing "ed"');
    assert.deepEqual(await q('workload', { terms: [{ op: '=', tag: '*', value: 'blue' }] }), ['g1/web', 'g2/web']);
    assert.deepEqual(await q('workload', { terms: [{ op: 'exists', tag: '*' }] }), ['g2/api', 'g1/db', 'g1/web', 'g2/web']);
    assert.deepEqual(await q('workload', { terms: [{ op: '!exists', tag: '*' }] }), ['g2/job']);
  });

  test('every op on properties: strings, numbers in dotted spec paths, dates, exists', async () => {
    const p = (kind: string, property: string, op: string, value?: unknown) => q(kind, { terms: [{ op, property, ...(value === undefined ? {} : { value }) }] });
    assert.deepEqual(await p('workload', 'name', '=', 'web'), ['g1/web', 'g2/web']);
    assert.deepEqual(await p('workload', 'name', '!=', 'web'), ['g2/api', 'g1/db', 'g2/job']);
    assert.deepEqual(await p('workload', 'name', '<', 'db'), ['g2/api'], 'strings compare bytewise');
    assert.deepEqual(await p('workload', 'description', '~', 'primary data'), ['g1/db']);
    assert.deepEqual(await p('workload', 'version', '>=', 2), ['g1/db'], 'the PATCH made version 2');
    assert.deepEqual(await p('workload', 'version', '<=', '1'), ['g2/api', 'g2/job', 'g1/web', 'g2/web'], 'a numeric string compares as a number');
    // Dotted spec path with numbers: 10 < 50 < 100 as numbers (as text "100" < "50").
    assert.deepEqual(await p('volumeset', 'spec.initialCapacity', '>', 20), ['g1/big', 'g2/mid']);
    assert.deepEqual(await p('volumeset', 'spec.initialCapacity', '>=', 50), ['g1/big', 'g2/mid']);
    assert.deepEqual(await p('volumeset', 'spec.initialCapacity', '<', 100), ['g2/mid', 'g1/small']);
    assert.deepEqual(await p('volumeset', 'spec.initialCapacity', '<=', 10), ['g1/small']);
    assert.deepEqual(await p('volumeset', 'spec.initialCapacity', '=', '50'), ['g2/mid']);
    assert.deepEqual(await p('workload', 'spec.containers', 'exists'), ['g2/api', 'g1/db', 'g2/job', 'g1/web', 'g2/web']);
    assert.deepEqual(await p('gvc', 'spec.env', 'exists'), ['g1']);
    assert.deepEqual(await p('gvc', 'spec.env', '!exists'), ['g2', 'g3']);
    assert.deepEqual(await p('gvc', 'description', '~', 'front door'), ['g1']);
    assert.deepEqual(await p('workload', 'spec.nothing.here', '=', 'x'), [], 'a missing property never matches');
    assert.deepEqual(await p('workload', 'spec.nothing.here', '!=', 'x'), [], 'not even with !=');

    // Dates compare chronologically, whatever their form.
    assert.deepEqual((await p('workload', 'created', '>', '2000-01-01T00:00:00Z')).length, 5);
    assert.deepEqual(await p('workload', 'created', '<', '2000-01-01T01:00:00+01:00'), []);
    const pivot = created['g2/web'];
    const later = Object.entries(created).filter(([, c]) => c > pivot).map(([place]) => place).sort();
    const notLater = Object.entries(created).filter(([, c]) => c <= pivot).map(([place]) => place).sort();
    assert.deepEqual((await p('workload', 'created', '>', pivot)).sort(), later);
    assert.deepEqual((await p('workload', 'created', '<=', pivot)).sort(), notLater);
    assert.ok(notLater.includes('g2/web') && notLater.includes('g1/web'));
    const all = (await ok('GET', '/org/acme/workload')).body.items;
    const modifiedAfter = all.filter((w: any) => w.lastModified > created['g2/web']).map(placeOf).sort();
    assert.ok(modifiedAfter.includes('g1/db'), 'the PATCH came after the creates');
    assert.deepEqual((await p('workload', 'lastModified', '>', created['g2/web'])).sort(), modifiedAfter);
  });

  test("kinds' own fields: location provider/region/origin, policy targetKind, group origin", async () => {
    assert.deepEqual(await q('location', { terms: [{ property: 'provider', value: 'aws' }, { property: 'region', value: 'us-west-2' }] }), ['aws-us-west-2']);
    const gcp = await q('location', { terms: [{ property: 'provider', value: 'gcp' }, { property: 'origin', value: 'builtin' }] });
    assert.ok(gcp.length > 1 && gcp.every((n) => n.startsWith('gcp-')), gcp.join());
    assert.deepEqual(await q('location', { terms: [{ property: 'origin', value: 'custom' }] }), []);
    assert.deepEqual(await q('policy', { terms: [{ property: 'targetKind', value: 'workload' }] }), ['blue-workloads', 'superusers-workload', 'viewers-workload']);
    assert.deepEqual(await q('policy', { terms: [{ property: 'targetKind', value: 'workload' }, { property: 'origin', value: 'builtin' }] }), ['superusers-workload', 'viewers-workload']);
    assert.deepEqual(await q('group', { terms: [{ property: 'origin', value: 'builtin' }] }), ['superusers', 'viewers']);
  });

  test('rel gvc for gvc-scoped kinds at the org level, as the CLI sends it; other rels by link name', async () => {
    assert.deepEqual(await q('workload', { match: 'all', terms: [{ op: '=', rel: 'gvc', value: 'g1' }] }), ['g1/db', 'g1/web']);
    assert.deepEqual(await q('workload', { terms: [{ op: '!=', rel: 'gvc', value: 'g1' }] }), ['g2/api', 'g2/job', 'g2/web']);
    assert.deepEqual(await q('workload', { terms: [{ rel: 'gvc', value: 'g2' }, { tag: 'tier', value: 'front' }] }), ['g2/web']);
    assert.deepEqual(await q('volumeset', { terms: [{ op: '~', rel: 'gvc', value: 'G' }] }), ['g1/big', 'g2/mid', 'g1/small']);
    assert.deepEqual(await q('workload', { terms: [{ rel: 'gvc', value: 'g3' }] }), []);
    assert.deepEqual(await q('gvc', { terms: [{ op: 'exists', rel: 'gvc' }] }), [], 'org-scoped kinds have no gvc');
    assert.deepEqual(await q('workload', { terms: [{ rel: 'identity', value: 'ident' }] }), ['g1/web']);
    assert.deepEqual(await q('workload', { terms: [{ op: 'exists', rel: 'identity' }] }), ['g1/web']);
  });

  test('a query under a GVC path covers that GVC only, pages within it, and names it in its links and echo', async () => {
    const res = await ok('POST', '/org/acme/gvc/g2/workload/-query', { spec: { terms: [{ op: '~', tag: 'tier', value: 'front' }] } });
    assert.deepEqual(res.body.items.map(placeOf), ['g2/api', 'g2/web']);
    assert.deepEqual(res.body.links, [{ rel: 'self', href: '/org/acme/gvc/g2/workload/-query' }]);
    assert.deepEqual(res.body.query.context, { org: 'acme', gvc: 'g2' });
    assert.deepEqual((await ok('POST', '/org/acme/gvc/g3/workload/-query', {})).body.items, []);
    const first = await ok('POST', '/org/acme/gvc/g1/identity/-query?limit=7', { spec: { match: 'all', terms: [] } });
    const pages = await follow(first);
    assert.ok(pages.length > 1);
    assert.ok(pages.every((page) => page.links.every((l: any) => l.href.startsWith('/org/acme/gvc/g1/identity/-query'))));
    const names = pages.flatMap((page) => page.items.map(placeOf));
    assert.deepEqual(names, [...ids(PAGED).map((n) => `g1/${n}`), 'g1/ident']);
    // The caller's view still applies, and a GVC that does not exist is 404.
    assert.deepEqual((await ok('POST', '/org/acme/gvc/g1/workload/-query', {}, { token: reader })).body.items.map(placeOf), ['g1/web']);
    assert.equal((await k.call('POST', '/org/acme/gvc/nope/workload/-query', {})).status, 404);
  });

  test('match all, any and none', async () => {
    const terms = [
      { op: '=', tag: 'tier', value: 'front' },
      { op: '=', rel: 'gvc', value: 'g1' },
    ];
    assert.deepEqual(await q('workload', { match: 'all', terms }), ['g1/web']);
    assert.deepEqual(await q('workload', { match: 'any', terms }), ['g1/db', 'g1/web', 'g2/web']);
    assert.deepEqual(await q('workload', { match: 'none', terms }), ['g2/api', 'g2/job']);
    assert.deepEqual(await q('workload', { match: 'none', terms: [] }), ['g2/api', 'g1/db', 'g2/job', 'g1/web', 'g2/web'], 'no terms match everything');
    assert.deepEqual(await q('workload', { match: 'any', terms: [] }), ['g2/api', 'g1/db', 'g2/job', 'g1/web', 'g2/web']);
  });

  test('sort asc and desc by name, by a column and by a dotted property; ties by name then gvc', async () => {
    assert.deepEqual(await q('workload', { sort: { by: 'name' } }), ['g2/api', 'g1/db', 'g2/job', 'g1/web', 'g2/web']);
    assert.deepEqual(await q('workload', { sort: { by: 'name', order: 'desc' } }), ['g2/web', 'g1/web', 'g2/job', 'g1/db', 'g2/api']);
    assert.deepEqual(await q('volumeset', { sort: { by: 'spec.initialCapacity', order: 'asc' } }), ['g1/small', 'g2/mid', 'g1/big'], 'numbers sort as numbers');
    assert.deepEqual(await q('volumeset', { sort: { by: 'spec.initialCapacity', order: 'desc' } }), ['g1/big', 'g2/mid', 'g1/small']);
    assert.deepEqual(await q('workload', { terms: [{ tag: 'tier', value: 'front' }], sort: { by: 'version', order: 'desc' } }), ['g2/web', 'g1/web']);
    const key = ([place, at]: [string, string]) => [at, place.split('/')[1], place.split('/')[0]].join('\u0000');
    const byCreated = Object.entries(created)
      .sort((a, b) => (key(a) < key(b) ? -1 : 1))
      .map(([p]) => p);
    assert.deepEqual(await q('workload', { sort: { by: 'created', order: 'asc' } }), byCreated);
  });

  test("fetch: 'links' returns the items' links", async () => {
    const res = await ok('POST', '/org/acme/workload/-query', { fetch: 'links', spec: { terms: [{ tag: 'tier', value: 'front' }] } });
    assert.equal(res.body.itemKind, 'link');
    assert.deepEqual(res.body.items, ['/org/acme/gvc/g1/workload/web', '/org/acme/gvc/g2/workload/web']);
    assert.equal(res.body.query.fetch, 'links');
  });

  test('the empty bodies the CLI sends, an empty JSON object and a body without kind match all', async () => {
    const everything = ['g2/api', 'g1/db', 'g2/job', 'g1/web', 'g2/web'];
    for (const [label, body, options] of [
      ['empty form-encoded', undefined, FORM],
      ['empty JSON object', {}, undefined],
      ['empty body, JSON content type', undefined, { rawBody: '', headers: { 'content-type': 'application/json' } }],
      ['spec without terms', { spec: { match: 'all' } }, undefined],
      ['kind "string" (sent by some clients)', { kind: 'string', spec: {} }, undefined],
    ] as const) {
      const res = await k.call('POST', '/org/acme/workload/-query', body, options as any);
      assert.equal(res.status, 200, `${label}: ${res.raw}`);
      assert.deepEqual(res.body.items.map(placeOf), everything, label);
      assert.equal(res.body.query.kind, 'workload', label);
      assert.deepEqual(res.body.query.spec.terms, [], label);
    }
    const noKind = await ok('POST', '/org/acme/gvc/-query', { spec: { terms: [{ tag: 'env', value: 'prod' }] } });
    assert.deepEqual(noKind.body.items.map(placeOf), ['g1']);
    const sameKind = await ok('POST', '/org/acme/gvc/-query', { kind: 'gvc', spec: { terms: [{ tag: 'env', value: 'prod' }] } });
    assert.deepEqual(sameKind.body.items.map(placeOf), ['g1']);
  });

  test('the result is exactly {kind, itemKind, items, links, query}, with the query echoed as sent', async () => {
    const terms = [
      { op: '=', rel: 'gvc', value: 'g1' },
      { tag: 'tier', value: 'front' },
      { op: 'exists', property: 'spec.containers' },
    ];
    const sort = { by: 'name', order: 'desc' };
    const res = await ok('POST', '/org/acme/workload/-query', { spec: { match: 'any', terms, sort } });
    assert.deepEqual(Object.keys(res.body).sort(), ['itemKind', 'items', 'kind', 'links', 'query']);
    assert.equal(res.body.kind, 'queryresult');
    assert.equal(res.body.itemKind, 'workload');
    assert.ok(Array.isArray(res.body.links));
    assert.equal(res.body.query.kind, 'workload');
    assert.deepEqual(res.body.query.context, { org: 'acme' });
    assert.equal(res.body.query.spec.match, 'any');
    assert.deepEqual(res.body.query.spec.terms, terms, 'terms as sent (no op filled in)');
    assert.deepEqual(res.body.query.spec.sort, sort);
    assert.match(String(res.headers['content-type']), /^application\/json/);
    const list = await ok('GET', '/org/acme/gvc/g1/workload');
    assert.deepEqual(Object.keys(list.body).sort(), ['itemKind', 'items', 'kind', 'links']);
    assert.equal(list.body.kind, 'list');
  });

  test('invalid queries are 400 with the offending term index in details.errors', async () => {
    const bad = async (body: unknown, path: string | RegExp) => {
      const res = await k.call('POST', '/org/acme/workload/-query', body);
      assert.equal(res.status, 400, JSON.stringify(body));
      assert.deepEqual(Object.keys(res.body).sort(), ['code', 'details', 'id', 'message', 'status']);
      assert.equal(res.body.code, 'bad_request');
      const paths = res.body.details.errors.map((e: any) => e.path);
      assert.ok(paths.some((p: string) => (typeof path === 'string' ? p === path : path.test(p))), `${JSON.stringify(body)} -> ${paths.join(', ')}`);
    };
    const good = { op: '=', tag: 'a', value: 'b' };
    await bad({ spec: { terms: [good, { op: '=~', tag: 'a', value: 'b' }] } }, 'spec.terms[1].op');
    await bad({ spec: { terms: [good, good, { op: 'contains', property: 'name', value: 'b' }] } }, 'spec.terms[2].op');
    await bad({ spec: { match: 'some', terms: [good] } }, 'spec.match');
    await bad({ spec: { terms: [{ tag: 'a', property: 'b', value: 'c' }] } }, 'spec.terms[0]');
    await bad({ spec: { terms: [good, { op: '=', value: 'c' }] } }, 'spec.terms[1]');
    await bad({ spec: { terms: [{ op: '=', tag: 'a' }] } }, 'spec.terms[0].value');
    await bad({ spec: { terms: [good, { op: '=', property: 'spec..x', value: 1 }] } }, 'spec.terms[1].property');
    await bad({ spec: { terms: [{ op: '=', property: 'name', value: { nested: true } }] } }, 'spec.terms[0].value');
    await bad({ spec: { terms: ['name=web'] } }, 'spec.terms[0]');
    await bad({ spec: { terms: { op: '=', tag: 'a', value: 'b' } } }, 'spec.terms');
    await bad({ spec: { sort: { by: 'name', order: 'up' } } }, 'spec.sort.order');
    await bad({ fetch: 'everything' }, 'fetch');
    await bad({ kind: 'gvc' }, 'kind');
    await bad([good], /.*/);
    const twoErrors = await k.call('POST', '/org/acme/workload/-query', { spec: { terms: [{ op: 'bogus', tag: 'x', value: 1 }, good, { tag: 'a', rel: 'gvc', value: 1 }] } });
    assert.deepEqual(
      twoErrors.body.details.errors.map((e: any) => e.path),
      ['spec.terms[0].op', 'spec.terms[2]'],
    );
  });

  test('a query over 260 items pages by rel next links followed with GET, none skipped or repeated, both orders', async () => {
    const everything = ['g1', 'g2'].flatMap((g) => ids(PAGED).map((n) => `${g}/${n}`));
    const byName = [...everything].sort((a, b) => (a.slice(3) < b.slice(3) ? -1 : a.slice(3) > b.slice(3) ? 1 : a < b ? -1 : 1));
    for (const order of ['asc', 'desc'] as const) {
      const first = await ok('POST', '/org/acme/identity/-query?limit=7', { spec: { terms: [{ op: '~', property: 'name', value: 'id-' }], sort: { by: 'name', order } } });
      const pages = await follow(first);
      assert.equal(pages.length, Math.ceil((2 * PAGED) / 7));
      for (const page of pages) {
        assert.ok(page.items.length <= 7);
        assert.deepEqual(page.query, first.body.query, 'every page echoes the query');
        assert.equal(page.kind, 'queryresult');
      }
      const seen = pages.flatMap((p) => p.items.map(placeOf));
      assert.deepEqual(seen, order === 'asc' ? byName : [...byName].reverse(), `${order}: every item once, in order`);
    }
    // The default page is 100; the query's terms and rel gvc carry over to later pages.
    const g2 = await ok('POST', '/org/acme/identity/-query', { spec: { terms: [{ rel: 'gvc', value: 'g2' }, { op: '~', property: 'name', value: 'id-' }] } });
    assert.equal(g2.body.items.length, 100);
    const g2pages = await follow(g2);
    assert.deepEqual(g2pages.map((p) => p.items.length), [100, PAGED - 100]);
    assert.deepEqual(g2pages.flatMap((p) => p.items.map(placeOf)), ids(PAGED).map((n) => `g2/${n}`));
    // A dotted-property sort pages too (all equal keys: ties break by name, then gvc).
    const bySpec = await ok('POST', '/org/acme/identity/-query?limit=50', { spec: { terms: [{ op: '~', property: 'name', value: 'id-' }], sort: { by: 'spec.nothing', order: 'desc' } } });
    assert.deepEqual((await follow(bySpec)).flatMap((p) => p.items.map(placeOf)), [...byName].reverse());
  });

  test('query paging while items are being created: nothing that existed is skipped or repeated', async () => {
    const existing = (await ok('POST', '/org/acme/identity/-query?limit=1000', {})).body.items.map(placeOf);
    assert.equal(existing.length, 2 * PAGED + 1);
    let n = 0;
    const between = async () => {
      // Around the cursor and at both ends of the order.
      for (const name of [`aa-${n}`, `id-050-${n}`, `id-120-${n}`, `zz-${n}`]) await ok('POST', '/org/acme/gvc/g1/identity', { name });
      n++;
    };
    const first = await ok('POST', '/org/acme/identity/-query?limit=20', { spec: { sort: { by: 'name', order: 'asc' } } });
    const seen = (await follow(first, { between })).flatMap((p) => p.items.map(placeOf));
    assert.ok(n >= 13, `pages followed: ${n}`);
    assert.equal(new Set(seen).size, seen.length, 'no item repeated');
    for (const place of existing) assert.ok(seen.includes(place), `${place} seen`);
    const sortedSeen = [...seen].sort((a, b) => {
      const [x, y] = [a.split('/'), b.split('/')];
      return x[1] < y[1] ? -1 : x[1] > y[1] ? 1 : x[0] < y[0] ? -1 : 1;
    });
    assert.deepEqual(seen, sortedSeen, 'still in order');
    assert.ok(seen.includes(`g1/zz-${n - 1}`) && seen.includes(`g1/id-120-0`), 'items created past the cursor show up');
    for (let i = 0; i < n; i++) for (const name of [`aa-${i}`, `id-050-${i}`, `id-120-${i}`, `zz-${i}`]) await ok('DELETE', `/org/acme/gvc/g1/identity/${name}`);
  });

  test('list pagination: ?limit and rel next with GET, org-wide and inside a GVC, while items are created', async () => {
    const first = await ok('GET', '/org/acme/identity?limit=9');
    assert.equal(first.body.kind, 'list');
    assert.equal(first.body.items.length, 9);
    const seen = (await follow(first)).flatMap((p) => {
      assert.deepEqual(Object.keys(p).sort(), ['itemKind', 'items', 'kind', 'links']);
      return p.items.map(placeOf);
    });
    const expected = ['g1', 'g2'].flatMap((g) => [...ids(PAGED), ...(g === 'g1' ? ['ident'] : [])].map((n) => `${g}/${n}`));
    assert.deepEqual([...seen].sort(), [...expected].sort());
    assert.equal(new Set(seen).size, seen.length);

    const inGvc = await follow(await ok('GET', '/org/acme/gvc/g2/identity'));
    assert.deepEqual(inGvc.map((p) => p.items.length), [100, PAGED - 100]);
    assert.deepEqual(inGvc.flatMap((p) => p.items.map(placeOf)), ids(PAGED).map((n) => `g2/${n}`));

    let n = 0;
    const live = await follow(await ok('GET', '/org/acme/gvc/g2/identity?limit=25'), {
      between: async () => {
        for (const name of [`aa-${n}`, `zz-${n}`]) await ok('POST', '/org/acme/gvc/g2/identity', { name });
        n++;
      },
    });
    const livePlaces = live.flatMap((p) => p.items.map(placeOf));
    assert.equal(new Set(livePlaces).size, livePlaces.length);
    for (const name of ids(PAGED)) assert.ok(livePlaces.includes(`g2/${name}`));
    for (let i = 0; i < n; i++) for (const name of [`aa-${i}`, `zz-${i}`]) await ok('DELETE', `/org/acme/gvc/g2/identity/${name}`);
  });

  test('?limit is 1..1000 on lists and queries; a bad next token or cursor is 400', async () => {
    for (const limit of ['0', '1001', '-1', '2.5', 'ten', '']) {
      assert.equal((await k.call('GET', `/org/acme/identity?limit=${limit}`)).status, 400, `list limit=${limit}`);
      const res = await k.call('POST', `/org/acme/identity/-query?limit=${limit}`, {});
      assert.equal(res.status, 400, `query limit=${limit}`);
      assert.equal(res.body.code, 'bad_request');
    }
    assert.equal((await ok('GET', '/org/acme/identity?limit=1')).body.items.length, 1);
    assert.equal((await ok('POST', '/org/acme/identity/-query?limit=1', {})).body.items.length, 1);
    assert.equal((await ok('GET', '/org/acme/identity?limit=1000')).body.items.length, 2 * PAGED + 1);
    assert.equal((await ok('POST', '/org/acme/identity/-query?limit=1000', {})).body.items.length, 2 * PAGED + 1);
    assert.equal((await k.call('GET', '/org/acme/identity/-query?next=garbage')).status, 400);
    assert.equal((await k.call('GET', '/org/acme/identity/-query')).status, 400);
    assert.equal((await k.call('GET', '/org/acme/identity?cursor=garbage')).status, 400);
  });

  test('queries and lists return only what the caller may view (policy targetQuery on a tag)', async () => {
    const as = { token: reader };
    assert.deepEqual(await q('workload', {}, as), ['g1/web', 'g2/web']);
    assert.deepEqual(await q('workload', { match: 'any', terms: [{ tag: 'tier', value: 'back' }, { rel: 'gvc', value: 'g2' }] }, as), ['g2/web']);
    assert.deepEqual(await q('workload', { terms: [{ tag: 'team', value: 'red' }] }, as), []);
    const form = await ok('POST', '/org/acme/workload/-query', undefined, { ...FORM, token: reader });
    assert.deepEqual(form.body.items.map(placeOf), ['g1/web', 'g2/web']);
    assert.deepEqual((await ok('GET', '/org/acme/workload', undefined, as)).body.items.map(placeOf), ['g1/web', 'g2/web']);
    assert.deepEqual((await ok('GET', '/org/acme/gvc/g1/workload', undefined, as)).body.items.map(placeOf), ['g1/web']);
    // Paging with the filter: one item a page, following next as the reader.
    const paged = await follow(await ok('POST', '/org/acme/workload/-query?limit=1', {}, as), { token: reader });
    assert.deepEqual(paged.flatMap((p) => p.items.map(placeOf)), ['g1/web', 'g2/web']);
    const listPaged = await follow(await ok('GET', '/org/acme/workload?limit=1', undefined, as), { token: reader });
    assert.deepEqual(listPaged.flatMap((p) => p.items.map(placeOf)), ['g1/web', 'g2/web']);
    // Nothing granted on other kinds.
    assert.deepEqual(await q('gvc', {}, as), []);
    assert.deepEqual((await ok('GET', '/org/acme/gvc/g1/identity', undefined, as)).body.items, []);
    assert.equal((await k.call('GET', '/org/acme/gvc/g1/workload/db', undefined, as)).status, 403);
    assert.equal((await k.call('GET', '/org/acme/gvc/g1/workload/web', undefined, as)).status, 200);
    // Retagging moves an item into the caller's view.
    await ok('PATCH', '/org/acme/gvc/g1/workload/db', { tags: { team: 'blue' } });
    try {
      assert.deepEqual(await q('workload', {}, as), ['g1/db', 'g1/web', 'g2/web']);
    } finally {
      await ok('PATCH', '/org/acme/gvc/g1/workload/db', { tags: { team: 'red' } });
    }
  });
});
