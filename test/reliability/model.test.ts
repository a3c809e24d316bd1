// Model-based test: random sequences of API operations on groups (create, get, patch with and
// without version, replace, apply, delete, list, query by tag) run against Keel and against a
// small in-memory model of the documented semantics; after every step both give the same
// observable results: status codes, names, versions, tags and descriptions.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import fc from 'fast-check';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';

type Tags = Record<string, string>;
interface Item {
  version: number;
  tags: Tags;
  description: string;
}
interface Model {
  prefix: string;
  items: Map<string, Item>;
}
interface Real {
  k: TestKeel;
}

const KEYS = ['a', 'b', 'c'];
const VALUES = ['x', 'y', 'z'];
const SHORT = ['g1', 'g2', 'g3'];
const tagsArb = fc.dictionary(fc.constantFrom(...KEYS), fc.constantFrom(...VALUES), { maxKeys: 3 });
const tagPatchArb = fc.dictionary(fc.constantFrom(...KEYS), fc.option(fc.constantFrom(...VALUES), { nil: null }), { maxKeys: 3 });
const descriptionArb = fc.option(fc.constantFrom('one', 'two'), { nil: undefined });

const sameTags = (a: Tags, b: Tags) => JSON.stringify(Object.entries(a).sort()) === JSON.stringify(Object.entries(b).sort());
const url = (m: Model, short?: string) => `/org/acme/group${short ? `/${m.prefix}${short}` : ''}`;

/** The version a client would send: the current one, a stale or future one, or none. */
const versionArb = fc.oneof(fc.constant<'current' | 'none'>('current'), fc.constant<'current' | 'none'>('none'), fc.integer({ min: -1, max: 3 }));
function versionFor(choice: 'current' | 'none' | number, item: Item | undefined): number | undefined {
  if (choice === 'none') return undefined;
  if (choice === 'current') return item?.version ?? 1;
  return Math.max(1, (item?.version ?? 1) + choice); // choice 0 is current too
}

function checkItem(body: any, name: string, item: Item, what: string): void {
  assert.equal(body.name, name, what);
  assert.equal(body.version, item.version, `${what}: version`);
  assert.deepEqual(body.tags, item.tags, `${what}: tags`);
  assert.equal(body.description, item.description, `${what}: description`);
}

class Create implements fc.AsyncCommand<Model, Real> {
  constructor(readonly short: string, readonly tags: Tags, readonly description?: string) {}
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    const name = m.prefix + this.short;
    const res = await r.k.call('POST', url(m), { name, tags: this.tags, ...(this.description ? { description: this.description } : {}) });
    if (m.items.has(name)) {
      assert.equal(res.status, 409, res.raw);
      assert.equal(res.body.code, 'already_exists');
      return;
    }
    assert.equal(res.status, 201, res.raw);
    const item = { version: 1, tags: { ...this.tags }, description: this.description ?? name };
    m.items.set(name, item);
    checkItem(res.body, name, item, 'create');
  }
  toString = () => `create ${this.short} ${JSON.stringify(this.tags)} ${this.description ?? ''}`;
}

class Get implements fc.AsyncCommand<Model, Real> {
  constructor(readonly short: string) {}
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    const name = m.prefix + this.short;
    const res = await r.k.call('GET', url(m, this.short));
    const item = m.items.get(name);
    if (!item) return assert.equal(res.status, 404, res.raw);
    assert.equal(res.status, 200, res.raw);
    checkItem(res.body, name, item, 'get');
  }
  toString = () => `get ${this.short}`;
}

class Patch implements fc.AsyncCommand<Model, Real> {
  constructor(readonly short: string, readonly tags: Record<string, string | null>, readonly description: string | undefined, readonly version: 'current' | 'none' | number) {}
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    const name = m.prefix + this.short;
    const item = m.items.get(name);
    const version = versionFor(this.version, item);
    const res = await r.k.call('PATCH', url(m, this.short), { tags: this.tags, ...(this.description ? { description: this.description } : {}), ...(version !== undefined ? { version } : {}) });
    if (!item) return assert.equal(res.status, 404, res.raw);
    if (version !== undefined && version !== item.version) {
      assert.equal(res.status, 409, res.raw);
      return assert.equal(res.body.code, 'conflict');
    }
    assert.equal(res.status, 200, res.raw);
    const tags = { ...item.tags };
    for (const [k, v] of Object.entries(this.tags)) {
      if (v === null) delete tags[k];
      else tags[k] = v;
    }
    const description = this.description ?? item.description;
    const changed = !sameTags(tags, item.tags) || description !== item.description;
    const next = { version: item.version + (changed ? 1 : 0), tags, description };
    m.items.set(name, next);
    checkItem(res.body, name, next, 'patch');
  }
  toString = () => `patch ${this.short} ${JSON.stringify(this.tags)} ${this.description ?? ''} version=${this.version}`;
}

class Replace implements fc.AsyncCommand<Model, Real> {
  constructor(readonly short: string, readonly tags: Tags, readonly description: string | undefined, readonly version: 'current' | 'none' | number, readonly apply: boolean) {}
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    const name = m.prefix + this.short;
    const item = m.items.get(name);
    const version = versionFor(this.version, item);
    const body = { name, tags: this.tags, ...(this.description ? { description: this.description } : {}), ...(version !== undefined && item ? { version } : {}) };
    const res = await r.k.call('PUT', this.apply ? url(m) : url(m, this.short), body);
    if (!item) {
      // PUT on a missing item creates it, as apply does (201).
      assert.equal(res.status, 201, res.raw);
      const created = { version: 1, tags: { ...this.tags }, description: this.description ?? name };
      m.items.set(name, created);
      return checkItem(res.body, name, created, this.apply ? 'apply (create)' : 'PUT item (create)');
    }
    if (version !== undefined && version !== item.version) {
      assert.equal(res.status, 409, res.raw);
      return assert.equal(res.body.code, 'conflict');
    }
    assert.equal(res.status, 200, res.raw);
    const description = this.description ?? name;
    const changed = !sameTags(this.tags, item.tags) || description !== item.description;
    const next = { version: item.version + (changed ? 1 : 0), tags: { ...this.tags }, description };
    m.items.set(name, next);
    checkItem(res.body, name, next, this.apply ? 'apply (replace)' : 'replace');
  }
  toString = () => `${this.apply ? 'apply' : 'replace'} ${this.short} ${JSON.stringify(this.tags)} ${this.description ?? ''} version=${this.version}`;
}

class Delete implements fc.AsyncCommand<Model, Real> {
  constructor(readonly short: string) {}
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    const name = m.prefix + this.short;
    const res = await r.k.call('DELETE', url(m, this.short));
    if (!m.items.has(name)) return assert.equal(res.status, 404, res.raw);
    assert.equal(res.status, 202, res.raw);
    assert.equal(res.raw, '');
    m.items.delete(name);
  }
  toString = () => `delete ${this.short}`;
}

function expectItems(m: Model, body: any, keep: (item: Item) => boolean, what: string): void {
  const got = (body.items as any[]).filter((i) => i.name.startsWith(m.prefix)).map((i) => [i.name, i.version, i.tags]);
  const want = [...m.items].filter(([, item]) => keep(item)).map(([name, item]) => [name, item.version, item.tags]);
  const byName = (a: any[], b: any[]) => (a[0] < b[0] ? -1 : 1);
  assert.deepEqual(got.sort(byName), want.sort(byName), what);
}

class List implements fc.AsyncCommand<Model, Real> {
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    const res = await r.k.call('GET', `${url(m)}?limit=1000`);
    assert.equal(res.status, 200, res.raw);
    assert.equal(res.body.kind, 'list');
    expectItems(m, res.body, () => true, 'list');
  }
  toString = () => 'list';
}

class QueryByTag implements fc.AsyncCommand<Model, Real> {
  constructor(readonly key: string, readonly value: string | '*') {}
  check = () => true;
  async run(m: Model, r: Real): Promise<void> {
    const term = this.value === '*' ? { op: 'exists', tag: this.key } : { op: '=', tag: this.key, value: this.value };
    const res = await r.k.call('POST', `${url(m)}/-query`, { kind: 'group', spec: { match: 'all', terms: [term] } });
    assert.equal(res.status, 200, res.raw);
    assert.equal(res.body.kind, 'queryresult');
    expectItems(m, res.body, (item) => (this.value === '*' ? Object.hasOwn(item.tags, this.key) : item.tags[this.key] === this.value), `query ${JSON.stringify(term)}`);
  }
  toString = () => `query tag ${this.key}=${this.value}`;
}

const shortArb = fc.constantFrom(...SHORT);
const commands = [
  fc.tuple(shortArb, tagsArb, descriptionArb).map(([s, t, d]) => new Create(s, t, d)),
  shortArb.map((s) => new Get(s)),
  fc.tuple(shortArb, tagPatchArb, descriptionArb, versionArb).map(([s, t, d, v]) => new Patch(s, t, d, v)),
  fc.tuple(shortArb, tagsArb, descriptionArb, versionArb, fc.boolean()).map(([s, t, d, v, a]) => new Replace(s, t, d, v, a)),
  shortArb.map((s) => new Delete(s)),
  fc.constant(new List()),
  fc.tuple(fc.constantFrom(...KEYS), fc.constantFrom(...VALUES, '*')).map(([k, v]) => new QueryByTag(k, v)),
];

forEachBackend('model-based API sequences', (backend) => {
  let k: TestKeel;
  let run = 0;
  before(async () => {
    k = await startKeel(backend);
  });
  after(() => k.close());

  test('random sequences of operations give the same results as the model', async () => {
    await fc.assert(
      fc.asyncProperty(fc.commands(commands, { maxCommands: 30 }), async (cmds) => {
        // Each run works on its own names, so runs need no cleanup between them.
        const prefix = `m${run++}-`;
        await fc.asyncModelRun(() => ({ model: { prefix, items: new Map() }, real: { k } }), cmds);
      }),
      { numRuns: Number(process.env.MODEL_RUNS ?? 80), includeErrorInReport: true },
    );
  });
});
