// GET /org/{org}/image/-latest/{repository}: the newest image of a repository that the caller may
// view (Terraform's cpln_image data source without a tag). Images come from registry pushes,
// so the test stores them directly.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { storedItem } from '../support/items.js';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';

forEachBackend('latest image of a repository', (backend) => {
  let k: TestKeel;
  before(async () => {
    k = await startKeel(backend, 'acme');
    const image = (name: string, created: string) => {
      const [repository, tag] = name.split(':');
      return storedItem(name, { org: 'acme', kind: 'image', created, lastModified: created, data: { name, tags: {}, repository, tag, digest: `sha256:${tag}` } });
    };
    await k.store.transaction(async (tx) => {
      await tx.insert(image('app:1', '2026-01-01T00:00:00.000Z'));
      await tx.insert(image('app:3', '2026-03-01T00:00:00.000Z'));
      await tx.insert(image('app:2', '2026-02-01T00:00:00.000Z'));
      await tx.insert(image('apple:9', '2026-04-01T00:00:00.000Z'));
    });
  });
  after(() => k.close());

  test('the newest image of the repository, not of one whose name starts the same', async () => {
    const latest = await k.call('GET', '/org/acme/image/-latest/app');
    assert.equal(latest.status, 200);
    assert.equal(latest.body.kind, 'image');
    assert.equal(latest.body.name, 'app:3');
    assert.equal(latest.body.tag, '3');
    assert.equal((await k.call('GET', '/org/acme/image/-latest/apple')).body.name, 'apple:9');
  });

  test('no such repository, a tag where a repository belongs, a caller who may view none', async () => {
    assert.equal((await k.call('GET', '/org/acme/image/-latest/nothing')).status, 404);
    assert.equal((await k.call('GET', '/org/acme/image/-latest/app:1')).status, 400);
    assert.equal((await k.call('GET', '/org/other/image/-latest/app')).status, 404, "the first org's superuser learns the org does not exist");
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name: 'nobody' })).status, 201);
    const key = (await k.call('POST', '/org/acme/serviceaccount/nobody/-addKey', { description: 't' })).body.key as string;
    const hidden = await k.call('GET', '/org/acme/image/-latest/app', undefined, { token: key });
    assert.equal(hidden.status, 404, 'what the caller may not view is not found, and not named');
    assert.doesNotMatch(hidden.raw, /app:3/);
  });
});
