// Bytes no backend can store or compare (NUL, lone surrogates) and forged page tokens, sent as an
// attacker would, in every place a request carries text: a clear 400 with the error object on both
// backends, never a 500, and nothing written.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { ERROR_KEYS } from '../support/errors.js';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';

const b64 = (value: unknown) => Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64url');

forEachBackend('inputs a backend cannot store', (backend) => {
  let k: TestKeel;
  before(async () => {
    k = await startKeel(backend);
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'gg' })).status, 201);
    for (const name of ['s1', 's2', 's3']) assert.equal((await k.call('POST', '/org/acme/secret', { name, type: 'opaque', data: { payload: 'x', encoding: 'plain' } })).status, 201);
  });
  after(() => k.close());

  const refused = async (what: string, method: string, url: string, body?: unknown, raw?: string) => {
    const res = await k.call(method, url, body, raw === undefined ? {} : { rawBody: raw, headers: { 'content-type': 'application/json' } });
    assert.equal(res.status, 400, `${what}: ${res.status} ${res.raw.slice(0, 300)}`);
    assert.deepEqual(Object.keys(res.body).sort(), ERROR_KEYS, what);
    assert.equal(res.body.code, 'bad_request', what);
    return res.body;
  };

  test('NUL and lone surrogates in bodies, names, tags, descriptions and query strings', async () => {
    await refused('a NUL in a name', 'POST', '/org/acme/gvc', { name: 'a\u0000b' });
    await refused('a NUL in a description', 'PATCH', '/org/acme/gvc/gg', { description: 'x\u0000' });
    await refused('a NUL in a tag key', 'PATCH', '/org/acme/gvc/gg', { tags: { 'k\u0000': 'v' } });
    await refused('a NUL in a tag value', 'PATCH', '/org/acme/gvc/gg', { tags: { k: 'v\u0000' } });
    await refused('a lone surrogate in a tag value', 'PATCH', '/org/acme/gvc/gg', undefined, '{"tags":{"k":"\\ud800"}}');
    await refused('a NUL in a query term', 'POST', '/org/acme/gvc/-query', { spec: { terms: [{ property: 'name', op: '=', value: 'gg\u0000' }] } });
    await refused('a NUL in a query term property', 'POST', '/org/acme/gvc/-query', { spec: { terms: [{ property: 'description\u0000', op: '=', value: 'g' }] } });
    await refused('a NUL in a path', 'GET', '/org/acme/gvc/gg%00');
    await refused('a NUL in a query string', 'GET', '/org/acme/gvc?limit=1%00');
    await refused('a NUL in a cursor', 'GET', '/org/acme/gvc?cursor=%00');
    await refused('a NUL in an audit filter', 'GET', '/org/acme/gvc/gg/-eventlog?next=%00');
    // JSON.stringify writes the NUL as the escape \u0000, as a client's JSON would.
    const watchQuery = JSON.stringify({ kind: 'gvc', spec: { terms: [{ property: 'name', op: '=', value: 'gg\u0000' }] } });
    await refused('a NUL escape in a watch query', 'GET', `/org/acme/-watch?kind=gvc&query=${encodeURIComponent(watchQuery)}`);
    // Nothing was written.
    const g = (await k.call('GET', '/org/acme/gvc/gg')).body;
    assert.equal(g.version, 1);
  });

  test('NUL in a LogQL selector or line filter, however it is spelled', async () => {
    const logs = (query: string) => `/logs/org/acme/loki/api/v1/query_range?${new URLSearchParams({ query })}`;
    await refused('a NUL escape in a label matcher', 'GET', logs('{gvc="\\u0000"}'));
    await refused('a NUL escape in a regex matcher', 'GET', logs('{gvc=~"g\\u0000"}'));
    await refused('a NUL escape in a line filter', 'GET', logs('{gvc="g"} |= "\\u0000"'));
    await refused('a lone surrogate escape in a line filter', 'GET', logs('{gvc="g"} != "\\ud800"'));
    await refused('a raw NUL in a raw string', 'GET', logs('{gvc=`g\u0000`}'));
    await refused('a NUL in a label name of label values', 'GET', '/logs/org/acme/loki/api/v1/label/gvc%00/values');
  });

  test('forged and malformed next tokens and cursors are 400, never 500', async () => {
    const first = await k.call('POST', '/org/acme/secret/-query?limit=1', { spec: { sort: { by: 'name' } } });
    assert.equal(first.status, 200, first.raw);
    const next = first.body.links.find((l: any) => l.rel === 'next').href as string;
    const token = JSON.parse(Buffer.from(new URL(next, 'http://x').searchParams.get('next')!, 'base64url').toString());
    const cursor = JSON.parse(Buffer.from(token.after, 'base64url').toString());
    const withCursor = (c: unknown) => b64({ ...token, after: b64(c) });
    const tokens: Array<[string, string]> = [
      ['not base64 JSON', 'not-a-token'],
      ['JSON of the wrong shape', b64([1, 2, 3])],
      ['a NUL in the cursor name', withCursor(cursor.map((v: unknown, i: number) => (i === 5 ? 'a\u0000' : v)))],
      ['a NUL in the cursor sort key', withCursor([cursor[0], cursor[1], 3, null, 'x\u0000', 's1', ''])],
      ['a lone surrogate in the cursor', withCursor([cursor[0], cursor[1], 3, null, 'x', '\ud800', ''])],
      ['a NUL in the query it carries', b64({ ...token, query: { spec: { terms: [{ property: 'name', op: '=', value: '\u0000' }], sort: { by: 'name' } } } })],
      ['a number as the cursor', b64({ ...token, after: 12 })],
      ['a huge limit', b64({ ...token, limit: 1e9 })],
    ];
    for (const [what, value] of tokens) await refused(what, 'GET', `/org/acme/secret/-query?next=${encodeURIComponent(value)}`);
    // List cursors.
    for (const [what, value] of [
      ['a list cursor with a NUL', b64(['name', 'asc', 3, null, 'a\u0000', 'a', ''])],
      ['a list cursor that is not JSON', '%%%'],
      ['a list cursor with a lone surrogate', b64(['name', 'asc', 3, null, '\udc00', 'a', ''])],
    ]) {
      await refused(what, 'GET', `/org/acme/secret?cursor=${encodeURIComponent(value)}`);
    }
    // Sequence tokens of -history and -eventlog: only whole numbers a page can start from.
    for (const next of ['1e300', '99999999999999999999', '-1', '1.5', 'x']) {
      await refused(`history next=${next}`, 'GET', `/org/acme/secret/s1/-history?next=${next}`);
      await refused(`eventlog next=${next}`, 'GET', `/org/acme/secret/s1/-eventlog?next=${next}`);
    }
  });
});
