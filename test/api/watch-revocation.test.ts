// Revocation ends streams: a watch opened with a key stops when the key is revoked, its service
// account is deleted (and stays ended when an account of the same name comes back), or a policy
// change takes away what it watched; on the process that made the change and (PostgreSQL) on
// another process. No change made after the revocation reaches the stream.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { openSse, type SseEvent, type SseStream } from '../support/sse.js';
import { spawnKeel, type KeelProcess } from '../support/spawn-keel.js';

forEachBackend('revocation ends watch streams', (backend) => {
  let k: TestKeel;
  let base: string;
  let second: KeelProcess | undefined;
  before(async () => {
    k = await startKeel(backend);
    base = await k.listen();
    if (backend === 'postgres') second = await spawnKeel(k.config.databaseUrl!);
  });
  after(async () => {
    await second?.stop();
    await k.close();
  });

  const send = async (at: string, method: string, path: string, body?: unknown) => {
    const res = await fetch(at + path, { method, headers: { authorization: `Bearer ${k.token}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    assert.ok(res.status < 300, `${method} ${path}: ${res.status} ${text}`);
    return text ? JSON.parse(text) : undefined;
  };
  /** A service account that may view every group, its policy and its key. */
  const watcherKey = async (name: string) => {
    await send(base, 'POST', '/org/acme/serviceaccount', { name });
    await send(base, 'POST', '/org/acme/policy', { name: `${name}-view`, targetKind: 'group', target: 'all', bindings: [{ permissions: ['view'], principalLinks: [`//serviceaccount/${name}`] }] });
    const key = await send(base, 'POST', `/org/acme/serviceaccount/${name}/-addKey`, { description: 'w' });
    return { token: key.key as string, keyName: key.name as string };
  };
  /** Opens a group watch and proves it delivers. */
  const watching = async (token: string, tag: string): Promise<SseStream> => {
    const stream = await openSse(`${base}/org/acme/-watch?kind=group`, { authorization: `Bearer ${token}` });
    await send(base, 'POST', '/org/acme/group', { name: `${tag}-before` });
    const [first] = await stream.take(1);
    assert.equal(first.data.object.name, `${tag}-before`);
    return stream;
  };
  const names = (events: SseEvent[]) => events.filter((e) => e.event !== 'bookmark').map((e) => e.data.object.name);

  const places = () => [
    { where: 'the same process', at: () => base },
    ...(backend === 'postgres' ? [{ where: 'another process', at: () => second!.base }] : []),
  ];

  for (const place of places()) {
    test(`revoking the key ($drop/keys) on ${place.where} ends the stream`, async () => {
      const tag = `rk-${place.where === 'the same process' ? 'a' : 'b'}`;
      const { token, keyName } = await watcherKey(tag);
      const stream = await watching(token, tag);
      await send(place.at(), 'PATCH', `/org/acme/serviceaccount/${tag}`, { '$drop/keys': [keyName] });
      await send(place.at(), 'POST', '/org/acme/group', { name: `${tag}-after` });
      assert.deepEqual(names(await stream.rest()), [], 'nothing after the revocation, and the stream ends');
      assert.equal((await fetch(`${base}/org/acme/-watch`, { headers: { authorization: `Bearer ${token}` } })).status, 401);
    });

    test(`deleting the service account on ${place.where} ends the stream, and re-creating the name does not revive it`, async () => {
      const tag = `rd-${place.where === 'the same process' ? 'a' : 'b'}`;
      const { token } = await watcherKey(tag);
      const stream = await watching(token, tag);
      await send(place.at(), 'DELETE', `/org/acme/serviceaccount/${tag}`);
      await send(place.at(), 'POST', '/org/acme/serviceaccount', { name: tag });
      await send(place.at(), 'POST', '/org/acme/group', { name: `${tag}-after` });
      assert.deepEqual(names(await stream.rest()), []);
      assert.equal((await fetch(`${base}/org/acme/-watch`, { headers: { authorization: `Bearer ${token}` } })).status, 401, 'the old key died with the old account');
    });

    test(`a policy change on ${place.where} that takes away view ends the stream of that kind`, async () => {
      const tag = `rp-${place.where === 'the same process' ? 'a' : 'b'}`;
      const { token } = await watcherKey(tag);
      const stream = await watching(token, tag);
      await send(place.at(), 'DELETE', `/org/acme/policy/${tag}-view`);
      await send(place.at(), 'POST', '/org/acme/group', { name: `${tag}-after` });
      assert.deepEqual(names(await stream.rest()), []);
    });
  }

  test("other principals' streams go on", async () => {
    const { token } = await watcherKey('bystander');
    const stream = await watching(token, 'by');
    const { keyName } = await watcherKey('victim');
    await send(base, 'PATCH', '/org/acme/serviceaccount/victim', { '$drop/keys': [keyName] });
    await send(base, 'POST', '/org/acme/group', { name: 'by-after' });
    const [next] = await stream.take(1);
    stream.close();
    assert.equal(next.data.object.name, 'by-after');
  });
});
