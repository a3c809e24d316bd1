// Seed 4.1: every plain field and directive of a group patch, alone and combined.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { applyPatch } from '../../src/patch/index.js';
import { assertBadRequest, assertValid, groupSchema, storedGroup, type Doc } from './fixtures.js';


function patched(patch: Record<string, unknown>): Doc {
  const result = applyPatch(storedGroup(), patch, groupSchema);
  assertValid(groupSchema, result);
  return result;
}

const terms = () => storedGroup().memberQuery.spec.terms as Doc[];

describe('group: plain fields', () => {
  test('name and description replace', () => {
    const g = patched({ name: 'devs', description: 'the developers' });
    assert.equal(g.name, 'devs');
    assert.equal(g.description, 'the developers');
  });

  test('tags merge key by key; null deletes a key', () => {
    assert.deepEqual(patched({ tags: { env: null, owner: 'ann' } }).tags, { team: 'core', owner: 'ann' });
  });

  test('memberLinks: a plain array replaces', () => {
    assert.deepEqual(patched({ memberLinks: ['/org/acme/user/b@x.io'] }).memberLinks, ['/org/acme/user/b@x.io']);
  });

  test('memberQuery deep-merges', () => {
    const g = patched({ memberQuery: { spec: { match: 'any' } } });
    assert.equal(g.memberQuery.kind, 'user');
    assert.equal(g.memberQuery.spec.match, 'any');
    assert.deepEqual(g.memberQuery.spec.terms, terms());
    assert.deepEqual(g.memberQuery.spec.sort, { by: 'name', order: 'asc' });
  });

  test('memberQuery.spec.terms: a plain array replaces', () => {
    const g = patched({ memberQuery: { spec: { terms: [{ op: '=', property: 'name', value: 'x' }] } } });
    assert.deepEqual(g.memberQuery.spec.terms, [{ op: '=', property: 'name', value: 'x' }]);
  });

  test('identityMatcher deep-merges', () => {
    assert.deepEqual(patched({ identityMatcher: { language: 'javascript' } }).identityMatcher, {
      expression: 'groups',
      language: 'javascript',
    });
  });

  test('null removes a field', () => {
    const g = patched({ memberQuery: null, description: null });
    assert.equal('memberQuery' in g, false);
    assert.equal('description' in g, false);
  });

  test('an empty patch changes nothing', () => {
    assert.deepEqual(patched({}), storedGroup());
  });
});

describe('group: top-level directives', () => {
  test('$drop removes each allowed entry', () => {
    for (const field of ['description', 'tags', 'memberLinks', 'memberQuery', 'identityMatcher']) {
      const g = patched({ $drop: [field] });
      assert.equal(field in g, false, field);
    }
  });

  test('$drop with all allowed entries at once', () => {
    const g = patched({ $drop: ['description', 'tags', 'memberLinks', 'memberQuery', 'identityMatcher'] });
    assert.deepEqual(Object.keys(g).sort(), ['created', 'id', 'kind', 'lastModified', 'links', 'name', 'origin', 'version']);
  });

  test('$replace/tags sets the map wholesale', () => {
    assert.deepEqual(patched({ '$replace/tags': { only: 'this' } }).tags, { only: 'this' });
  });

  test('$drop/memberLinks removes equal links', () => {
    assert.deepEqual(patched({ '$drop/memberLinks': ['/org/acme/serviceaccount/ci', '/org/acme/user/none'] }).memberLinks, [
      '/org/acme/user/a@x.io',
    ]);
  });

  test('$append/memberLinks appends and skips links already present', () => {
    assert.deepEqual(
      patched({ '$append/memberLinks': ['/org/acme/user/a@x.io', '/org/acme/user/c@x.io', '/org/acme/user/c@x.io'] }).memberLinks,
      ['/org/acme/user/a@x.io', '/org/acme/serviceaccount/ci', '/org/acme/user/c@x.io'],
    );
  });

  test('$append/memberLinks creates the array when absent', () => {
    const stored = storedGroup();
    delete stored.memberLinks;
    assert.deepEqual(applyPatch(stored, { '$append/memberLinks': ['/org/acme/user/z@x.io'] }, groupSchema).memberLinks, [
      '/org/acme/user/z@x.io',
    ]);
  });

  test('$retain/memberLinks keeps only the listed links', () => {
    assert.deepEqual(patched({ '$retain/memberLinks': ['/org/acme/serviceaccount/ci'] }).memberLinks, ['/org/acme/serviceaccount/ci']);
  });

  test('$replace/memberQuery sets the query wholesale', () => {
    const query = { kind: 'user', spec: { match: 'none', terms: [{ op: '=', tag: 'x', value: 'y' }] } };
    assert.deepEqual(patched({ '$replace/memberQuery': query }).memberQuery, query);
  });

  test('$replace/identityMatcher sets it wholesale', () => {
    assert.deepEqual(patched({ '$replace/identityMatcher': { expression: 'roles' } }).identityMatcher, { expression: 'roles' });
  });

  test('directives combine in the fixed order', () => {
    const g = patched({
      $drop: ['description'],
      tags: { team: 'platform' },
      '$replace/tags': { fresh: 'yes' },
      memberLinks: ['/org/acme/user/a@x.io', '/org/acme/user/b@x.io', '/org/acme/user/c@x.io'],
      '$drop/memberLinks': ['/org/acme/user/a@x.io'],
      '$retain/memberLinks': ['/org/acme/user/b@x.io', '/org/acme/user/d@x.io'],
      '$append/memberLinks': ['/org/acme/user/d@x.io'],
      '$replace/identityMatcher': { expression: 'e', language: 'jmespath' },
    });
    assert.equal('description' in g, false);
    // plain tags merge first, then $replace/tags wins
    assert.deepEqual(g.tags, { fresh: 'yes' });
    // plain replace -> $drop/ -> $retain/ -> $append/
    assert.deepEqual(g.memberLinks, ['/org/acme/user/b@x.io', '/org/acme/user/d@x.io']);
    assert.deepEqual(g.identityMatcher, { expression: 'e', language: 'jmespath' });
  });
});

describe('group: memberQuery levels', () => {
  test('memberQuery: $drop, kind, $replace/spec', () => {
    assert.equal('kind' in patched({ memberQuery: { $drop: ['kind'] } }).memberQuery, false);
    assert.equal(patched({ memberQuery: { kind: 'serviceaccount' } }).memberQuery.kind, 'serviceaccount');
    assert.deepEqual(patched({ memberQuery: { '$replace/spec': { match: 'any' } } }).memberQuery, {
      kind: 'user',
      spec: { match: 'any' },
    });
  });

  test('memberQuery.spec: $drop, match', () => {
    const g = patched({ memberQuery: { spec: { $drop: ['sort', 'terms'], match: 'none' } } });
    assert.deepEqual(g.memberQuery.spec, { match: 'none' });
  });

  test('$drop/terms removes the terms with that property, tag or rel', () => {
    const g = patched({ memberQuery: { spec: { '$drop/terms': ['email', 'manager'] } } });
    assert.deepEqual(g.memberQuery.spec.terms, [terms()[1]]);
  });

  test('$retain/terms keeps only the listed terms', () => {
    const g = patched({ memberQuery: { spec: { '$retain/terms': ['team'] } } });
    assert.deepEqual(g.memberQuery.spec.terms, [terms()[1]]);
  });

  test('$append/terms appends terms', () => {
    const term = { op: '=', property: 'email', value: 'b@x.io' };
    const g = patched({ memberQuery: { spec: { '$append/terms': [term] } } });
    assert.deepEqual(g.memberQuery.spec.terms, [...terms(), term]);
  });

  test('$patch/terms patches the matching term: value, $replace/value, $drop', () => {
    const g = patched({
      memberQuery: {
        spec: {
          '$patch/terms': [
            { property: 'email', value: '@y.io' },
            { tag: 'team', '$replace/value': 'ops' },
            { rel: 'manager', $drop: ['op'] },
          ],
        },
      },
    });
    assert.deepEqual(g.memberQuery.spec.terms, [
      { op: '~', property: 'email', value: '@y.io' },
      { op: '=', tag: 'team', value: 'ops' },
      { rel: 'manager' },
    ]);
  });

  test('$patch/terms on a term that is not there appends it', () => {
    const g = patched({ memberQuery: { spec: { '$patch/terms': [{ op: '=', property: 'name', value: 'ann' }] } } });
    assert.deepEqual(g.memberQuery.spec.terms.at(-1), { op: '=', property: 'name', value: 'ann' });
    assert.equal(g.memberQuery.spec.terms.length, 4);
  });

  test('sort: $drop and merge; $replace/sort', () => {
    assert.deepEqual(patched({ memberQuery: { spec: { sort: { $drop: ['order'] } } } }).memberQuery.spec.sort, { by: 'name' });
    assert.deepEqual(patched({ memberQuery: { spec: { sort: { order: 'desc' } } } }).memberQuery.spec.sort, { by: 'name', order: 'desc' });
    assert.deepEqual(patched({ memberQuery: { spec: { '$replace/sort': { by: 'email' } } } }).memberQuery.spec.sort, { by: 'email' });
  });

  test('identityMatcher: $drop, expression, language', () => {
    assert.deepEqual(patched({ identityMatcher: { $drop: ['language'], expression: 'x' } }).identityMatcher, { expression: 'x' });
  });

  test('every memberQuery level at once', () => {
    const g = patched({
      memberQuery: {
        kind: 'user',
        spec: {
          match: 'any',
          '$drop/terms': ['manager'],
          '$retain/terms': ['email', 'team', 'name'],
          '$patch/terms': [{ tag: 'team', $drop: ['value'], op: 'exists' }],
          '$append/terms': [{ op: '=', property: 'name', value: 'bo' }],
          sort: { $drop: ['order'], by: 'created' },
        },
      },
    });
    assert.deepEqual(g.memberQuery, {
      kind: 'user',
      spec: {
        match: 'any',
        terms: [
          { op: '~', property: 'email', value: '@x.io' },
          { op: 'exists', tag: 'team' },
          { op: '=', property: 'name', value: 'bo' },
        ],
        sort: { by: 'created' },
      },
    });
  });

  test('merging into an absent memberQuery builds it', () => {
    const stored = storedGroup();
    delete stored.memberQuery;
    const g = applyPatch(stored, { memberQuery: { spec: { '$append/terms': [{ op: '=', tag: 't', value: 'v' }] } } }, groupSchema);
    assert.deepEqual(g.memberQuery, { spec: { terms: [{ op: '=', tag: 't', value: 'v' }] } });
  });
});

describe('group: what the seed does not list', () => {
  test('$replace on arrays and single-typed scalars -> 400', () => {
    assertBadRequest(() => patched({ '$replace/memberLinks': [] }), '$replace/memberLinks');
    assertBadRequest(() => patched({ '$replace/description': 'x' }), '$replace/description');
    assertBadRequest(() => patched({ memberQuery: { spec: { '$replace/terms': [] } } }), 'memberQuery.spec.$replace/terms');
    assertBadRequest(() => patched({ memberQuery: { spec: { '$replace/match': 'any' } } }), 'memberQuery.spec.$replace/match');
  });

  test('$patch on a primitive array -> 400', () => {
    assertBadRequest(() => patched({ '$patch/memberLinks': [{ name: 'x' }] }), '$patch/memberLinks');
  });

  test('$drop of name (required) or origin-like unknowns -> 400', () => {
    assertBadRequest(() => patched({ $drop: ['name'] }), '$drop[0]', /required/);
    assertBadRequest(() => patched({ $drop: ['description', 'members'] }), '$drop[1]', /not a known field/);
  });

  test('memberQuery.context is not a field a patch of terms addresses as an array', () => {
    assertBadRequest(() => patched({ memberQuery: { '$append/context': [1] } }), 'memberQuery.$append/context', /not an array/);
  });

  test('a patch term without property, tag or rel -> 400 naming the item', () => {
    assertBadRequest(
      () => patched({ memberQuery: { spec: { '$patch/terms': [{ property: 'email', value: 'a' }, { op: '=' }] } } }),
      'memberQuery.spec.$patch/terms[1]',
      /property\|tag\|rel/,
    );
  });

  test('a nested unknown directive inside a $patch item -> 400 with its full path', () => {
    assertBadRequest(
      () => patched({ memberQuery: { spec: { '$patch/terms': [{ tag: 'team', '$replace/values': 'x' }] } } }),
      'memberQuery.spec.$patch/terms[0].$replace/values',
    );
  });
});
