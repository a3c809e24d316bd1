import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ApiError } from '../../src/errors.js';
import { parseQuery } from '../../src/query/index.js';

const matchAll = { kind: 'gvc', fetch: 'items', spec: { match: 'all', terms: [] } };

test('absent, null, empty-string and {} bodies match everything', () => {
  for (const body of [undefined, null, '', '  ', {}, { spec: null }, { spec: {} }, { spec: { terms: null } }]) {
    assert.deepEqual(parseQuery(body, { kind: 'gvc' }), matchAll, JSON.stringify(body));
  }
});

test('normalizes defaults and keeps terms and sort as sent', () => {
  const q = parseQuery(
    {
      kind: 'workload',
      fetch: 'links',
      context: { org: 'ignored' },
      spec: { match: 'any', terms: [{ property: 'spec.x', value: 3 }, { op: 'exists', tag: 'a' }, { op: '~', rel: 'gvc', value: 'p' }], sort: { by: 'created' } },
    },
    { kind: 'workload' },
  );
  assert.deepEqual(q, {
    kind: 'workload',
    fetch: 'links',
    spec: {
      match: 'any',
      terms: [{ op: '=', property: 'spec.x', value: 3 }, { op: 'exists', tag: 'a' }, { op: '~', rel: 'gvc', value: 'p' }],
      sort: { by: 'created', order: 'asc' },
    },
  });
});

test('a body kind of "string" (CPF) counts as absent', () => {
  assert.equal(parseQuery({ kind: 'string', spec: {} }, { kind: 'gvc' }).kind, 'gvc');
});

test('every op is accepted', () => {
  for (const op of ['=', '!=', '>', '>=', '<', '<=', '~', 'exists', '!exists']) {
    assert.equal(parseQuery({ spec: { terms: [{ op, tag: 't', value: 'v' }] } }, { kind: 'gvc' }).spec.terms[0].op, op);
  }
});

function errorsOf(body: unknown, kind: { kind: string; hidden?: string[] } = { kind: 'gvc' }): Array<{ path: string; message: string }> {
  try {
    parseQuery(body, kind);
  } catch (err) {
    assert.ok(err instanceof ApiError);
    assert.equal(err.status, 400);
    assert.equal(err.code, 'bad_request');
    return (err.details as { errors: Array<{ path: string; message: string }> }).errors;
  }
  assert.fail(`accepted ${JSON.stringify(body)}`);
}

const term = (t: unknown, index = 0) => ({ spec: { terms: [...Array(index).fill({ tag: 'ok', op: 'exists' }), t] } });

const BAD: Array<[string, unknown, string]> = [
  ['not an object', [1, 2], ''],
  ['a non-empty string', 'kind=gvc', ''],
  ['unknown top-level field', { kind: 'gvc', extra: 1 }, 'extra'],
  ['kind other than the URL kind', { kind: 'workload' }, 'kind'],
  ['non-string kind', { kind: 7 }, 'kind'],
  ['bad fetch', { fetch: 'all' }, 'fetch'],
  ['spec not an object', { spec: [] }, 'spec'],
  ['unknown spec field', { spec: { filter: {} } }, 'spec.filter'],
  ['bad match', { spec: { match: 'some' } }, 'spec.match'],
  ['terms not an array', { spec: { terms: {} } }, 'spec.terms'],
  ['too many terms', { spec: { terms: Array(101).fill({ tag: 'a', op: 'exists' }) } }, 'spec.terms'],
  ['term not an object', term('x', 1), 'spec.terms[1]'],
  ['bad op', term({ op: '=~', property: 'name', value: 'x' }, 2), 'spec.terms[2].op'],
  ['no target', term({ op: '=', value: 'x' }, 1), 'spec.terms[1]'],
  ['two targets', term({ property: 'name', tag: 'x', value: 'x' }), 'spec.terms[0]'],
  ['unknown term field', term({ property: 'name', value: 'x', regex: true }, 3), 'spec.terms[3].regex'],
  ['empty property', term({ property: '', value: 'x' }), 'spec.terms[0].property'],
  ['SQL in a property path', term({ property: "name') OR 1=1 --", value: 'x' }, 1), 'spec.terms[1].property'],
  ['quote in a property path', term({ property: 'spec."x"', value: 'x' }), 'spec.terms[0].property'],
  ['empty path segment', term({ property: 'spec..x', value: 'x' }), 'spec.terms[0].property'],
  ['path too deep', term({ property: 'a.b.c.d.e.f.g.h.i.j.k', value: 'x' }), 'spec.terms[0].property'],
  ['path too long', term({ property: 'a'.repeat(257), value: 'x' }), 'spec.terms[0].property'],
  ['non-string tag', term({ tag: 5, value: 'x' }), 'spec.terms[0].tag'],
  ['bad rel name', term({ rel: 'a/b', value: 'x' }), 'spec.terms[0].rel'],
  ['missing value', term({ op: '>', property: 'version' }, 1), 'spec.terms[1].value'],
  ['object value', term({ property: 'name', value: { a: 1 } }), 'spec.terms[0].value'],
  ['array value', term({ property: 'name', value: [1] }), 'spec.terms[0].value'],
  ['value too long', term({ property: 'name', value: 'x'.repeat(4097) }), 'spec.terms[0].value'],
  ['sort not an object', { spec: { sort: 'name' } }, 'spec.sort'],
  ['sort without by', { spec: { sort: { order: 'asc' } } }, 'spec.sort.by'],
  ['sort by *', { spec: { sort: { by: '*' } } }, 'spec.sort.by'],
  ['sort by injection', { spec: { sort: { by: 'name; DROP TABLE resources' } } }, 'spec.sort.by'],
  ['bad sort order', { spec: { sort: { by: 'name', order: 'up' } } }, 'spec.sort.order'],
  ['unknown sort field', { spec: { sort: { by: 'name', nulls: 'first' } } }, 'spec.sort.nulls'],
];

for (const [title, body, path] of BAD) {
  test(`400: ${title}`, () => {
    const errors = errorsOf(body);
    assert.ok(
      errors.some((e) => e.path === path),
      `expected an error at ${JSON.stringify(path)}, got ${JSON.stringify(errors)}`,
    );
  });
}

test('all term errors are reported, each with its index', () => {
  const errors = errorsOf({ spec: { terms: [{ op: 'x', tag: 't', value: 1 }, { tag: 'ok', op: 'exists' }, { property: 'a b', value: 1 }] } });
  assert.deepEqual(
    errors.map((e) => e.path),
    ['spec.terms[0].op', 'spec.terms[2].property'],
  );
});

test('a term or sort that meets a hidden field is refused, wherever it stands', () => {
  const secret = { kind: 'secret', hidden: ['data'] };
  const cases: Array<[unknown, string]> = [
    [term({ op: '~', property: 'data.payload', value: 'x' }, 1), 'spec.terms[1].property'],
    [term({ op: 'exists', property: 'data' }), 'spec.terms[0].property'],
    [{ spec: { sort: { by: 'data.password' } } }, 'spec.sort.by'],
    [{ spec: { sort: { by: 'data' } } }, 'spec.sort.by'],
  ];
  for (const [body, path] of cases) {
    const errors = errorsOf(body, secret);
    assert.ok(errors.some((e) => e.path === path && /data/.test(e.message)), `${JSON.stringify(body)}: ${JSON.stringify(errors)}`);
  }
  // Nested hidden paths: the field itself, what lies under it and what holds it.
  const nested = { kind: 'x', hidden: ['spec.token', 'tags.private', 'authLink'] };
  for (const [body, path] of [
    [term({ op: 'exists', property: 'spec' }), 'spec.terms[0].property'],
    [term({ op: '=', property: 'spec.token.part', value: 1 }), 'spec.terms[0].property'],
    [term({ op: '=', tag: 'private', value: 1 }), 'spec.terms[0].tag'],
    [term({ op: 'exists', tag: '*' }), 'spec.terms[0].tag'],
    [term({ op: '=', rel: 'auth', value: 'a' }), 'spec.terms[0].rel'],
  ] as Array<[unknown, string]>) {
    assert.ok(errorsOf(body, nested).some((e) => e.path === path), JSON.stringify(body));
  }
  // Fields beside a hidden one stay queryable; `*` is allowed (it skips hidden fields).
  const q = parseQuery({ spec: { terms: [{ property: 'spec.other', value: 1 }, { tag: 'public', value: 1 }, { op: '~', property: '*', value: 'x' }], sort: { by: 'type' } } }, nested);
  assert.equal(q.spec.terms.length, 3);
  assert.deepEqual(q.hidden, nested.hidden);
});
