// The distribution API over a real socket, as a client and as an attacker: the challenge and the
// token flow, chunked uploads and resumption, mounts, indexes and referrers, paging, deletes, gc,
// each permission with a limited key, and every bad input (digest mismatch, missing blobs,
// unknown media types, oversized and truncated uploads, a client gone mid-upload, path
// traversal): a registry error, nothing partial visible, nothing left on disk.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync, truncateSync } from 'node:fs';
import { request } from 'node:http';
import { connect } from 'node:net';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { manifestOf, OCI_MANIFEST, sha } from '../support/oci.js';
import { spawnKeel } from '../support/spawn-keel.js';
import { rawExec } from '../support/raw-sql.js';
import { waitFor } from '../support/wait.js';

const OCI_INDEX = 'application/vnd.oci.image.index.v1+json';
const MAX_BLOB = 64 * 1024;

forEachBackend('registry: the distribution API', (backend) => {
  let keel: TestKeel;
  let base: string;
  const keys: Record<string, string> = {};

  const reg = async (method: string, path: string, options: { body?: Buffer | string; headers?: Record<string, string>; key?: string | null; basic?: boolean; at?: string } = {}) => {
    const headers: Record<string, string> = { ...(options.headers ?? {}) };
    const key = options.key === undefined ? keel.token : options.key;
    if (key !== null) headers.authorization = options.basic === false ? `Bearer ${key}` : `Basic ${Buffer.from(`user:${key}`).toString('base64')}`;
    const res = await fetch((options.at ?? base) + path, { method, headers, body: options.body, redirect: 'manual' });
    const raw = Buffer.from(await res.arrayBuffer());
    let json: any;
    try {
      json = JSON.parse(raw.toString('utf8'));
    } catch {
      json = undefined;
    }
    return { status: res.status, headers: res.headers, raw, json };
  };
  const pushBlob = async (repo: string, content: Buffer | string, key?: string) => {
    const res = await reg('POST', `/v2/${repo}/blobs/uploads/?digest=${sha(content)}`, { body: content, headers: { 'content-type': 'application/octet-stream' }, key });
    assert.equal(res.status, 201, res.raw.toString());
    return { digest: sha(content), size: Buffer.byteLength(content) };
  };
  const putManifest = (repo: string, ref: string, body: string, key?: string, type = OCI_MANIFEST) => reg('PUT', `/v2/${repo}/manifests/${ref}`, { body, headers: { 'content-type': type }, key });
  /** What unfinished uploads left behind: temp files beside SQLite; sessions and content no blob names in PostgreSQL. */
  const leftovers = async (withCacheTemps = true): Promise<string[]> => {
    if (backend === 'sqlite') {
      const dir = join(keel.config.dataDir, 'registry', 'uploads');
      return readdirSync(dir).flatMap((d) => readdirSync(join(dir, d)));
    }
    const sessions = await rawExec(keel, 'SELECT 1 FROM registry_uploads');
    const orphans = await rawExec(keel, 'SELECT DISTINCT content FROM registry_content WHERE content NOT IN (SELECT content FROM registry_blobs)');
    return [...Array(sessions).fill('session'), ...Array(orphans).fill('content'), ...(withCacheTemps ? cacheTemps() : [])];
  };
  /** Temp files of the local cache of PostgreSQL content (an upload's copy, a read being cached). */
  const cacheTemps = () => {
    const dir = join(keel.config.dataDir, 'registry', 'cache', 'tmp');
    return existsSync(dir) ? readdirSync(dir).flatMap((d) => readdirSync(join(dir, d)).map((f) => `cache temp ${f}`)) : [];
  };
  const code = (res: { json: any }) => res.json?.errors?.[0]?.code;
  /** `keel registry gc` as an operator runs it, on this Keel's store. */
  const gc = (...flags: string[]) => {
    const env = { ...process.env, KEEL_DATA_DIR: keel.config.dataDir, ...(keel.config.databaseUrl ? { KEEL_DATABASE_URL: keel.config.databaseUrl } : {}) };
    return new Promise<string>((resolve, reject) =>
      execFile(process.execPath, ['--import', 'tsx', join(import.meta.dirname, '..', '..', 'src', 'cli.ts'), 'registry', 'gc', ...flags], { env }, (err, stdout, stderr) => (err ? reject(new Error(stderr)) : resolve(stdout))),
    );
  };

  before(async () => {
    keel = await startKeel(backend, 'acme', { registryMaxBlobBytes: MAX_BLOB });
    base = await keel.listen();
    // Keys limited to one permission each on images, and one with none.
    for (const [name, permissions] of Object.entries({ puller: ['pull'], viewer: ['view'], pusher: ['create'], editor: ['edit', 'pull'], deleter: ['delete', 'pull'], nobody: [] as string[] })) {
      assert.equal((await keel.call('POST', '/org/acme/serviceaccount', { name })).status, 201);
      keys[name] = (await keel.call('POST', `/org/acme/serviceaccount/${name}/-addKey`, { description: 'test' })).body.key;
      if (permissions.length) {
        const policy = await keel.call('POST', '/org/acme/policy', { name: `images-${name}`, targetKind: 'image', target: 'all', bindings: [{ permissions, principalLinks: [`//serviceaccount/${name}`] }] });
        assert.equal(policy.status, 201, policy.raw);
      }
    }
  });
  after(async () => keel?.close());

  test('without credentials: 401 UNAUTHORIZED with a bearer challenge; the token endpoint takes a key; Basic works directly', async () => {
    const anonymous = await reg('GET', '/v2/', { key: null });
    assert.equal(anonymous.status, 401);
    assert.equal(code(anonymous), 'UNAUTHORIZED');
    assert.equal(anonymous.headers.get('www-authenticate'), `Bearer realm="${base}/v2/token",service="keel"`);
    const scoped = await reg('GET', '/v2/app/manifests/v1', { key: null });
    assert.match(scoped.headers.get('www-authenticate')!, /scope="repository:app:pull,push"/);
    const wrong = await reg('GET', '/v2/', { key: 'not-a-key' });
    assert.equal(wrong.status, 401);
    assert.equal(code(wrong), 'UNAUTHORIZED');
    assert.deepEqual((await reg('GET', '/v2/')).json, {});
    const token = await reg('GET', '/v2/token?service=keel&scope=repository:app:pull');
    assert.equal(token.status, 200);
    assert.equal((await reg('GET', '/v2/', { key: token.json.token, basic: false })).status, 200);
    const refused = await reg('GET', '/v2/token?service=keel', { key: 'nope' });
    assert.equal(refused.status, 401);
    const oauth = await reg('POST', '/v2/token', { key: null, body: `grant_type=refresh_token&refresh_token=${encodeURIComponent(keel.token)}&service=keel`, headers: { 'content-type': 'application/x-www-form-urlencoded' } });
    assert.equal(oauth.status, 200, oauth.raw.toString());
    assert.equal(oauth.json.access_token, keel.token);
    // The API's own error object stays off /v2/ and the registry's off the API.
    const api = await keel.call('GET', '/org/acme/image/nothing:v1');
    assert.equal(api.body.code, 'not_found');
  });

  test('a chunked upload: status, resumption at the right offset, a wrong offset refused, ranges on the result', async () => {
    const content = Buffer.from('0123456789abcdefghij');
    const started = await reg('POST', '/v2/chunky/blobs/uploads/');
    assert.equal(started.status, 202);
    const location = started.headers.get('location')!;
    assert.match(location, /^\/v2\/chunky\/blobs\/uploads\/[0-9a-f-]{36}$/);
    const first = await reg('PATCH', location, { body: content.subarray(0, 8), headers: { 'content-type': 'application/octet-stream', 'content-range': '0-7' } });
    assert.equal(first.status, 202);
    assert.equal(first.headers.get('range'), '0-7');
    const status = await reg('GET', location);
    assert.equal(status.status, 204);
    assert.equal(status.headers.get('range'), '0-7');
    const skipped = await reg('PATCH', location, { body: content.subarray(10), headers: { 'content-type': 'application/octet-stream', 'content-range': '10-19' } });
    assert.equal(skipped.status, 416);
    assert.equal(skipped.headers.get('range'), '0-7');
    const rest = await reg('PATCH', location, { body: content.subarray(8, 15), headers: { 'content-type': 'application/octet-stream', 'content-range': '8-14' } });
    assert.equal(rest.headers.get('range'), '0-14');
    const done = await reg('PUT', `${location}?digest=${sha(content)}`, { body: content.subarray(15), headers: { 'content-type': 'application/octet-stream' } });
    assert.equal(done.status, 201, done.raw.toString());
    assert.equal(done.headers.get('docker-content-digest'), sha(content));
    const head = await reg('HEAD', `/v2/chunky/blobs/${sha(content)}`);
    assert.equal(head.status, 200);
    assert.equal(head.headers.get('content-length'), '20');
    const ranged = await reg('GET', `/v2/chunky/blobs/${sha(content)}`, { headers: { range: 'bytes=2-5' } });
    assert.equal(ranged.status, 206);
    assert.equal(ranged.raw.toString(), '2345');
    assert.equal(ranged.headers.get('content-range'), 'bytes 2-5/20');
    const beyond = await reg('GET', `/v2/chunky/blobs/${sha(content)}`, { headers: { range: 'bytes=50-60' } });
    assert.equal(beyond.status, 416);
    assert.equal((await reg('GET', location)).status, 404, 'a finished upload is gone');
    assert.deepEqual(await leftovers(), []);
  });

  test('manifests by tag and digest, an index of them, a cross-repository mount, referrers and tag paging', async () => {
    const config = await pushBlob('base/app', '{"architecture":"amd64","os":"linux"}');
    const layer = await pushBlob('base/app', 'layer one');
    const manifest = manifestOf(config, [layer]);
    const put = await putManifest('base/app', 'v1', manifest);
    assert.equal(put.status, 201, put.raw.toString());
    assert.equal(put.headers.get('docker-content-digest'), sha(manifest));
    for (const ref of ['v1', sha(manifest)]) {
      const got = await reg('GET', `/v2/base/app/manifests/${ref}`, { headers: { accept: OCI_MANIFEST } });
      assert.equal(got.status, 200);
      assert.equal(got.raw.toString(), manifest, 'byte for byte');
      assert.equal(got.headers.get('content-type'), OCI_MANIFEST);
    }
    // Mounting into another repository of the org: 201, no upload.
    const mounted = await reg('POST', `/v2/other/app/blobs/uploads/?mount=${layer.digest}&from=base/app`);
    assert.equal(mounted.status, 201);
    assert.equal((await reg('HEAD', `/v2/other/app/blobs/${layer.digest}`)).status, 200);
    // An index naming the manifest by digest, and a manifest list of Docker's.
    const index = JSON.stringify({ schemaVersion: 2, mediaType: OCI_INDEX, manifests: [{ mediaType: OCI_MANIFEST, digest: sha(manifest), size: manifest.length, platform: { architecture: 'amd64', os: 'linux' } }] });
    assert.equal((await putManifest('base/app', 'multi', index, undefined, OCI_INDEX)).status, 201);
    const dockerList = 'application/vnd.docker.distribution.manifest.list.v2+json';
    const list = JSON.stringify({ schemaVersion: 2, mediaType: dockerList, manifests: [{ mediaType: OCI_MANIFEST, digest: sha(manifest), size: manifest.length }] });
    assert.equal((await putManifest('base/app', 'list', list, undefined, dockerList)).status, 201);
    assert.equal((await reg('GET', '/v2/base/app/manifests/multi')).headers.get('content-type'), OCI_INDEX);
    // A signature-like artifact referring to the manifest.
    const empty = await pushBlob('base/app', '{}');
    const signature = manifestOf(empty, [], { artifactType: 'application/vnd.example.sig', subject: { mediaType: OCI_MANIFEST, digest: sha(manifest), size: manifest.length } });
    const signed = await putManifest('base/app', sha(signature), signature);
    assert.equal(signed.status, 201, signed.raw.toString());
    assert.equal(signed.headers.get('oci-subject'), sha(manifest));
    const referrers = await reg('GET', `/v2/base/app/referrers/${sha(manifest)}`);
    assert.deepEqual(referrers.json.manifests, [{ mediaType: OCI_MANIFEST, digest: sha(signature), size: signature.length, artifactType: 'application/vnd.example.sig' }]);
    const filtered = await reg('GET', `/v2/base/app/referrers/${sha(manifest)}?artifactType=application/other`);
    assert.deepEqual(filtered.json.manifests, []);
    assert.equal(filtered.headers.get('oci-filters-applied'), 'artifactType');
    // Paging through the tags.
    const page = await reg('GET', '/v2/base/app/tags/list?n=2');
    assert.deepEqual(page.json, { name: 'base/app', tags: ['list', 'multi'] });
    assert.equal(page.headers.get('link'), '</v2/base/app/tags/list?n=2&last=multi>; rel="next"');
    assert.deepEqual((await reg('GET', '/v2/base/app/tags/list?n=2&last=multi')).json.tags, ['v1']);
    // Deleting by digest deletes the tags that name it; the index that names it stays.
    assert.equal((await putManifest('base/app', 'v1-copy', manifest)).status, 201);
    assert.equal((await reg('DELETE', `/v2/base/app/manifests/${sha(manifest)}`)).status, 202);
    assert.deepEqual((await reg('GET', '/v2/base/app/tags/list')).json.tags, ['list', 'multi']);
    assert.equal((await keel.call('GET', '/org/acme/image/base%2Fapp:v1')).status, 404);
    assert.equal(code(await reg('GET', '/v2/base/app/manifests/v1')), 'MANIFEST_UNKNOWN');
  });

  test('bad manifests: digest mismatch, missing blobs or children, unknown media types, not JSON; nothing is recorded', async () => {
    const config = await pushBlob('bad', '{"os":"linux"}');
    const missing = { digest: sha('never pushed'), size: 12 };
    const cases: Array<[string, string, string, number, string, string?]> = [
      ['wrong digest', sha('something else'), manifestOf(config, []), 400, 'DIGEST_INVALID'],
      ['missing layer', 'v1', manifestOf(config, [missing]), 400, 'MANIFEST_BLOB_UNKNOWN'],
      ['missing config', 'v1', manifestOf(missing, []), 400, 'MANIFEST_BLOB_UNKNOWN'],
      ['missing child', 'v1', JSON.stringify({ schemaVersion: 2, mediaType: OCI_INDEX, manifests: [{ mediaType: OCI_MANIFEST, ...missing }] }), 400, 'MANIFEST_BLOB_UNKNOWN', OCI_INDEX],
      ['unknown media type', 'v1', JSON.stringify({ schemaVersion: 2, mediaType: 'application/vnd.example+json', config }), 400, 'MANIFEST_INVALID', 'application/vnd.example+json'],
      ['schema 1', 'v1', JSON.stringify({ schemaVersion: 1, mediaType: OCI_MANIFEST, config, layers: [] }), 400, 'MANIFEST_INVALID'],
      ['not JSON', 'v1', '{"schemaVersion": 2,', 400, 'MANIFEST_INVALID'],
      ['bad descriptor', 'v1', manifestOf({ digest: '../../etc/passwd', size: 1 }, []), 400, 'MANIFEST_INVALID'],
      ['bad tag', '-v1', manifestOf(config, []), 400, 'MANIFEST_INVALID'],
    ];
    for (const [what, ref, body, status, errorCode, type] of cases) {
      const res = await putManifest('bad', ref, body, undefined, type ?? OCI_MANIFEST);
      assert.equal(res.status, status, `${what}: ${res.raw}`);
      assert.equal(code(res), errorCode, what);
    }
    const huge = await putManifest('bad', 'v1', JSON.stringify({ schemaVersion: 2, mediaType: OCI_MANIFEST, config, layers: [], annotations: { pad: 'x'.repeat(5 * 1024 * 1024) } }));
    assert.equal(huge.status, 413);
    assert.equal(code(huge), 'SIZE_INVALID');
    assert.equal((await keel.call('GET', '/org/acme/image/bad:v1')).status, 404);
    assert.deepEqual((await reg('GET', '/v2/bad/tags/list')).json.tags, []);
  });

  test('bad uploads: digest mismatch, oversized, truncated, cut off mid-body; nothing visible, nothing left on disk', async () => {
    const content = Buffer.from('the real content');
    const mismatch = await reg('POST', `/v2/up/blobs/uploads/?digest=${sha('claimed')}`, { body: content, headers: { 'content-type': 'application/octet-stream' } });
    assert.equal(mismatch.status, 400);
    assert.equal(code(mismatch), 'DIGEST_INVALID');
    assert.equal((await reg('HEAD', `/v2/up/blobs/${sha(content)}`)).status, 404);
    assert.equal((await reg('HEAD', `/v2/up/blobs/${sha('claimed')}`)).status, 404);
    const big = Buffer.alloc(MAX_BLOB + 1, 7);
    const oversized = await reg('POST', `/v2/up/blobs/uploads/?digest=${sha(big)}`, { body: big, headers: { 'content-type': 'application/octet-stream' } });
    assert.equal(oversized.status, 413);
    assert.equal(code(oversized), 'SIZE_INVALID');
    assert.equal((await reg('HEAD', `/v2/up/blobs/${sha(big)}`)).status, 404);
    // Chunks adding up past the limit.
    const session = (await reg('POST', '/v2/up/blobs/uploads/')).headers.get('location')!;
    assert.equal((await reg('PATCH', session, { body: big.subarray(0, MAX_BLOB), headers: { 'content-type': 'application/octet-stream' } })).status, 202);
    const over = await reg('PATCH', session, { body: Buffer.from('x'), headers: { 'content-type': 'application/octet-stream' } });
    assert.equal(over.status, 413);
    assert.equal((await reg('GET', session)).headers.get('range'), `0-${MAX_BLOB - 1}`, 'the refused chunk left nothing');
    assert.equal((await reg('DELETE', session)).status, 204);
    // A body that ends before its Content-Length, then the connection closes: the client is gone.
    const port = new URL(base).port;
    const partial = Buffer.from('only part of it');
    await new Promise<void>((resolve) => {
      const socket = connect(Number(port), '127.0.0.1', () => {
        socket.write(
          `POST /v2/up/blobs/uploads/?digest=${sha('only part of it and more')} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Basic ${Buffer.from(`u:${keel.token}`).toString('base64')}\r\nContent-Type: application/octet-stream\r\nContent-Length: 1000\r\n\r\n`,
        );
        socket.write(partial, () => setImmediate(() => socket.destroy()));
      });
      socket.on('close', () => resolve());
      socket.on('error', () => resolve());
    });
    await waitFor('the cut-off upload to be dropped', leftovers, (files) => files.length === 0);
    assert.equal((await reg('HEAD', `/v2/up/blobs/${sha('only part of it and more')}`)).status, 404);
    assert.equal((await reg('HEAD', `/v2/up/blobs/${sha(partial)}`)).status, 404);
    // A chunk cut off mid-body leaves the session where it was.
    const resumable = (await reg('POST', '/v2/up/blobs/uploads/')).headers.get('location')!;
    await reg('PATCH', resumable, { body: Buffer.from('abc'), headers: { 'content-type': 'application/octet-stream' } });
    await new Promise<void>((resolve) => {
      const socket = connect(Number(port), '127.0.0.1', () => {
        socket.write(`PATCH ${resumable} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${keel.token}\r\nContent-Type: application/octet-stream\r\nContent-Length: 100\r\n\r\ndefgh`, () => setImmediate(() => socket.destroy()));
      });
      socket.on('close', () => resolve());
      socket.on('error', () => resolve());
    });
    await waitFor('the session to be back at 3 bytes', () => reg('GET', resumable).then((r) => r.headers.get('range')), (range) => range === '0-2');
    const finished = await reg('PUT', `${resumable}?digest=${sha('abcdef')}`, { body: Buffer.from('def'), headers: { 'content-type': 'application/octet-stream' } });
    assert.equal(finished.status, 201, finished.raw.toString());
    assert.deepEqual(await leftovers(), []);
  });

  /** A PATCH whose body stops after `sent` until `rest` is called: the request is then writing to the session. */
  const slowPatch = (at: string, location: string, sent: Buffer, total: number) => {
    const url = new URL(at);
    const socket = connect(Number(url.port), url.hostname);
    let answer = '';
    socket.on('data', (d) => (answer += d.toString()));
    const answered = new Promise<string>((resolve) => socket.on('close', () => resolve(answer)));
    socket.write(`PATCH ${location} HTTP/1.1\r\nHost: ${url.host}\r\nAuthorization: Bearer ${keel.token}\r\nContent-Type: application/octet-stream\r\nContent-Length: ${total}\r\nConnection: close\r\n\r\n`);
    socket.write(sent);
    return { rest: (bytes: Buffer) => socket.write(bytes), answered };
  };
  /** Whether a request holds the session's row (PostgreSQL): a lock attempt that must not wait fails. */
  const sessionBusy = (location: string) => rawExec(keel, 'SELECT 1 FROM registry_uploads WHERE id = ? FOR UPDATE NOWAIT', [location.split('/').pop()]).then(() => false, () => true);

  if (backend === 'postgres') {
    test('an upload started through one Keel process continues through another: status, chunks, finish, and one writer at a time', async () => {
      const second = await spawnKeel(keel.config.databaseUrl!);
      try {
        const content = Buffer.from('chunks through two processes, finished through either');
        const started = await reg('POST', '/v2/relay/blobs/uploads/');
        assert.equal(started.status, 202);
        const location = started.headers.get('location')!;
        const octets = { 'content-type': 'application/octet-stream' };
        assert.equal((await reg('PATCH', location, { body: content.subarray(0, 10), headers: { ...octets, 'content-range': '0-9' } })).status, 202);
        // The other process knows the session and where it stands.
        const status = await reg('GET', location, { at: second.base });
        assert.equal(status.status, 204);
        assert.equal(status.headers.get('range'), '0-9');
        const wrong = await reg('PATCH', location, { at: second.base, body: content.subarray(12, 20), headers: { ...octets, 'content-range': '12-19' } });
        assert.equal(wrong.status, 416);
        assert.equal(wrong.headers.get('range'), '0-9');
        const more = await reg('PATCH', location, { at: second.base, body: content.subarray(10, 30), headers: { ...octets, 'content-range': '10-29' } });
        assert.equal(more.status, 202, more.raw.toString());
        assert.equal(more.headers.get('range'), '0-29');
        assert.equal((await reg('GET', location)).headers.get('range'), '0-29', 'the first process sees the second one\'s chunk');

        // While one request writes to the session, a request through the other process is refused, not interleaved.
        const slow = slowPatch(base, location, content.subarray(30, 35), content.length - 30);
        await waitFor('the slow chunk to hold the session', () => sessionBusy(location), (busy) => busy);
        const meanwhile = await reg('PATCH', location, { at: second.base, body: Buffer.from('xx'), headers: { ...octets, 'content-range': '30-31' } });
        assert.equal(meanwhile.status, 416);
        assert.equal(code(meanwhile), 'BLOB_UPLOAD_INVALID');
        slow.rest(content.subarray(35));
        assert.match(await slow.answered, /^HTTP\/1.1 202/);

        // The first process finishes it; its hash no longer covers the session (the second process
        // appended), so it reads the content back to check the digest.
        const wrongDigest = await reg('PUT', `${location}?digest=${sha('something else')}`, { at: second.base });
        assert.equal(wrongDigest.status, 400);
        assert.equal(code(wrongDigest), 'DIGEST_INVALID');
        assert.equal((await reg('GET', location)).status, 404, 'a refused finish ends the session');
        assert.deepEqual(await leftovers(), []);

        const again = (await reg('POST', '/v2/relay/blobs/uploads/', { at: second.base })).headers.get('location')!;
        assert.equal((await reg('PATCH', again, { at: second.base, body: content.subarray(0, 25), headers: octets })).status, 202);
        assert.equal((await reg('PATCH', again, { body: content.subarray(25), headers: octets })).status, 202);
        const done = await reg('PUT', `${again}?digest=${sha(content)}`, { at: second.base });
        assert.equal(done.status, 201, done.raw.toString());
        for (const at of [base, second.base]) {
          const blob = await reg('GET', `/v2/relay/blobs/${sha(content)}`, { at });
          assert.equal(blob.status, 200);
          assert.ok(blob.raw.equals(content), 'the blob is the content, whichever process serves it');
        }
        assert.deepEqual(await leftovers(), []);
      } finally {
        await second.stop();
      }
    });

    test('gc drops upload sessions abandoned for an hour with their content, never one a request is writing to', async () => {
      const octets = { 'content-type': 'application/octet-stream' };
      const abandoned = (await reg('POST', '/v2/stale/blobs/uploads/')).headers.get('location')!;
      assert.equal((await reg('PATCH', abandoned, { body: Buffer.alloc(20_000, 1), headers: octets })).status, 202);
      const live = (await reg('POST', '/v2/stale/blobs/uploads/')).headers.get('location')!;
      assert.equal((await reg('PATCH', live, { body: Buffer.from('abc'), headers: octets })).status, 202);
      // Both untouched for two hours, as far as the database says; one of them is being written to right now.
      const ids = [abandoned, live].map((location) => location.split('/').pop());
      assert.equal(await rawExec(keel, "UPDATE registry_uploads SET touched = now() - interval '2 hours' WHERE id = ? OR id = ?", ids), 2);
      const slow = slowPatch(base, live, Buffer.from('de'), 3);
      await waitFor('the slow chunk to hold the session', () => sessionBusy(live), (busy) => busy);
      await gc();
      assert.equal((await reg('GET', abandoned)).status, 404, 'the abandoned session is gone');
      slow.rest(Buffer.from('f'));
      assert.match(await slow.answered, /^HTTP\/1.1 202/);
      assert.equal((await reg('GET', live)).headers.get('range'), '0-5', 'the session being written to is whole');
      const done = await reg('PUT', `${live}?digest=${sha('abcdef')}`);
      assert.equal(done.status, 201, done.raw.toString());
      // The serving process's cached copy of what the session received goes with its own expiry of sessions idle an hour (gc ran in another process here).
      assert.deepEqual(await leftovers(false), [], 'nothing of the abandoned session is left');
    });
  }

  test('path traversal and malformed names are NAME_INVALID, never a path outside the store', async () => {
    // Sent as written (node:http does not normalize paths as fetch does).
    const raw = (path: string) =>
      new Promise<{ status: number; json: any; raw: string }>((resolve, reject) => {
        const req = request({ host: '127.0.0.1', port: Number(new URL(base).port), path, headers: { authorization: `Bearer ${keel.token}` } }, (res) => {
          let body = '';
          res.on('data', (c) => (body += c));
          res.on('end', () => resolve({ status: res.statusCode!, raw: body, json: JSON.parse(body) }));
        });
        req.on('error', reject);
        req.end();
      });
    for (const path of ['/v2/../../etc/blobs/sha256:' + 'a'.repeat(64), '/v2/a/../../etc/manifests/v1', '/v2/a/..%2F..%2Fetc/manifests/v1', '/v2/a/%2e%2e/tags/list', '/v2/UPPER/tags/list', '/v2/a//b/tags/list', '/v2/.hidden/tags/list']) {
      const res = await raw(path);
      assert.ok(res.status === 400 || res.status === 404, `${path}: ${res.status} ${res.raw}`);
      assert.ok(['NAME_INVALID', 'UNSUPPORTED'].includes(code(res)), `${path}: ${res.raw}`);
    }
    const badDigest = await raw('/v2/app/blobs/sha256:..%2F..%2Fkeel.db');
    assert.ok(['DIGEST_INVALID', 'UNSUPPORTED'].includes(code(badDigest)) && badDigest.status < 500, badDigest.raw);
    assert.equal(code(await raw('/v2/app/blobs/sha256:..')), 'DIGEST_INVALID');
    const md5 = await reg('GET', '/v2/app/blobs/md5:abc');
    assert.equal(code(md5), 'DIGEST_INVALID');
  });

  test('permissions: pull needs pull, push needs create or edit, delete needs delete; anything else is DENIED', async () => {
    const config = await pushBlob('perm/app', '{"perm":1}');
    const manifest = manifestOf(config, []);
    assert.equal((await putManifest('perm/app', 'v1', manifest)).status, 201);
    const pull = (key: string) => reg('GET', '/v2/perm/app/manifests/v1', { key }).then((r) => r.status);
    const push = (key: string, tag: string) => putManifest('perm/app', tag, manifest, key).then((r) => [r.status, code(r)]);
    assert.equal(await pull(keys.puller), 200);
    assert.equal(await pull(keys.editor), 200);
    assert.equal(await pull(keys.pusher), 200, 'create implies pull');
    for (const name of ['viewer', 'nobody']) {
      const denied = await reg('GET', '/v2/perm/app/manifests/v1', { key: keys[name] });
      assert.equal(denied.status, 403, name);
      assert.equal(code(denied), 'DENIED');
      assert.equal((await reg('GET', `/v2/perm/app/blobs/${config.digest}`, { key: keys[name] })).status, 403);
      assert.equal((await reg('GET', '/v2/perm/app/tags/list', { key: keys[name] })).status, 403);
    }
    assert.deepEqual(await push(keys.pusher, 'v2'), [201, undefined], 'create makes a new tag');
    assert.deepEqual(await push(keys.pusher, 'v1'), [403, 'DENIED'], 'moving an existing tag needs edit');
    assert.deepEqual(await push(keys.editor, 'v1'), [201, undefined]);
    assert.deepEqual(await push(keys.editor, 'v9'), [403, 'DENIED'], 'edit alone creates nothing');
    for (const name of ['puller', 'viewer', 'nobody']) {
      assert.deepEqual(await push(keys[name], 'v3'), [403, 'DENIED'], name);
      const upload = await reg('POST', '/v2/perm/app/blobs/uploads/', { key: keys[name] });
      assert.equal(upload.status, 403, name);
    }
    for (const name of ['puller', 'pusher', 'editor']) {
      assert.equal((await reg('DELETE', '/v2/perm/app/manifests/v2', { key: keys[name] })).status, 403, name);
    }
    assert.equal((await reg('DELETE', '/v2/perm/app/manifests/v2', { key: keys.deleter })).status, 202);
    // An upload session is the org's and repository's that started it.
    const session = (await reg('POST', '/v2/perm/app/blobs/uploads/', { key: keys.pusher })).headers.get('location')!;
    const elsewhere = await reg('PATCH', session.replace('perm/app', 'perm/other'), { body: 'x', headers: { 'content-type': 'application/octet-stream' } });
    assert.equal(code(elsewhere), 'BLOB_UPLOAD_UNKNOWN');
    // A revoked key is refused at once.
    const revoke = await keel.call('PATCH', '/org/acme/serviceaccount/puller', { '$drop/keys': [keys.puller.split('.')[0]] });
    assert.equal(revoke.status, 200, revoke.raw);
    assert.equal(await pull(keys.puller), 401);
  });

  test('a Host of the form ORG.registry.<domain> names the org; a key that is no member of it is refused there', async () => {
    const viaHost = (host: string, path: string) =>
      new Promise<{ status: number; json: any }>((resolve, reject) => {
        const req = request({ host: '127.0.0.1', port: Number(new URL(base).port), path, headers: { host, authorization: `Bearer ${keel.token}` } }, (res) => {
          let body = '';
          res.on('data', (c) => (body += c));
          res.on('end', () => resolve({ status: res.statusCode!, json: body ? JSON.parse(body) : undefined }));
        });
        req.on('error', reject);
        req.end();
      });
    const config = await pushBlob('hosted/app', '{"hosted":true}');
    assert.equal((await putManifest('hosted/app', 'v1', manifestOf(config, []))).status, 201);
    const same = await viaHost('acme.registry.example.test', '/v2/hosted/app/tags/list');
    assert.deepEqual(same.json, { name: 'hosted/app', tags: ['v1'] });
    assert.equal((await keel.call('POST', '/org', { name: 'elsewhere' })).status, 201);
    const stranger = await viaHost('nosuchorg.registry.example.test', '/v2/hosted/app/tags/list');
    assert.ok(stranger.status === 403 || stranger.status === 404, JSON.stringify(stranger));
    assert.ok(['DENIED', 'NAME_UNKNOWN'].includes(stranger.json.errors[0].code));
    assert.deepEqual((await viaHost('elsewhere.registry.example.test', '/v2/hosted/app/tags/list')).json, { name: 'hosted/app', tags: [] }, "the other org's registry holds none of acme's tags");
  });

  test('another org cannot read or mount this org\'s content', async () => {
    const secret = await pushBlob('private', 'org secret layer');
    const other = await keel.call('POST', '/org', { name: 'rival' });
    assert.equal(other.status, 201, other.raw);
    const rivalAccount = await keel.call('POST', '/org/rival/serviceaccount', { name: 'robot' });
    assert.equal(rivalAccount.status, 201);
    const rivalKey = (await keel.call('POST', '/org/rival/serviceaccount/robot/-addKey', {})).body.key;
    await keel.call('POST', '/org/rival/policy', { name: 'all-images', targetKind: 'image', target: 'all', bindings: [{ permissions: ['manage'], principalLinks: ['//serviceaccount/robot'] }] });
    assert.equal(code(await reg('HEAD', `/v2/private/blobs/${secret.digest}`, { key: rivalKey })), undefined);
    assert.equal((await reg('HEAD', `/v2/private/blobs/${secret.digest}`, { key: rivalKey })).status, 404);
    const mount = await reg('POST', `/v2/stolen/blobs/uploads/?mount=${secret.digest}&from=private`, { key: rivalKey });
    assert.equal(mount.status, 202, 'no mount: an ordinary upload starts instead');
    // The same content pushed by the rival itself is theirs (stored once).
    await pushBlob('stolen', 'org secret layer', rivalKey);
    assert.equal((await reg('HEAD', `/v2/stolen/blobs/${secret.digest}`, { key: rivalKey })).status, 200);
  });

  if (backend === 'postgres') {
    /** A process's cached copy of a digest, or undefined. */
    const cacheFile = (dataDir: string, d: string) => join(dataDir, 'registry', 'cache', 'sha256', d.slice(7, 9), d.slice(7));
    const cached = (dataDir: string, d: string) => (existsSync(cacheFile(dataDir, d)) ? readFileSync(cacheFile(dataDir, d)) : undefined);
    const cacheBytes = (dataDir: string) => {
      const root = join(dataDir, 'registry', 'cache', 'sha256');
      return readdirSync(root).flatMap((p) => readdirSync(join(root, p)).map((f) => statSync(join(root, p, f)).size)).reduce((a, b) => a + b, 0);
    };
    /** Flips the first byte of the blob's rows in PostgreSQL (twice restores it): what a read from PostgreSQL returns changes, the cache's copy does not. */
    const flipFirstByte = (digest: string) =>
      rawExec(keel, 'UPDATE registry_content SET data = set_byte(data, 0, 255 - get_byte(data, 0)) WHERE start = 0 AND content = (SELECT content FROM registry_blobs WHERE digest = ?)', [digest]);
    const layer = (n: number, seed: number) => Buffer.from(Array.from({ length: n }, (_, i) => (i * 31 + seed) % 251));

    test('the local cache: a push is kept as it arrives, pulls are served from it whole and by range; a cut-short copy is not served, content with the wrong digest not cached', async () => {
      const content = layer(40_000, 1);
      const { digest } = await pushBlob('cached/app', content);
      // Written through: the bytes the upload received, without a read from PostgreSQL.
      assert.deepEqual(cached(keel.config.dataDir, digest), content);
      await flipFirstByte(digest);
      // PostgreSQL now holds other bytes: what is pulled is the cached copy.
      assert.deepEqual((await reg('GET', `/v2/cached/app/blobs/${digest}`)).raw, content);
      const ranged = await reg('GET', `/v2/cached/app/blobs/${digest}`, { headers: { range: 'bytes=0-9999' } });
      assert.equal(ranged.status, 206);
      assert.deepEqual(ranged.raw, content.subarray(0, 10_000));
      assert.deepEqual((await reg('GET', `/v2/cached/app/blobs/${digest}`, { headers: { range: 'bytes=-5' } })).raw, content.subarray(-5));
      // A copy of the wrong length (cut short on disk) is dropped, and the read goes to PostgreSQL…
      truncateSync(cacheFile(keel.config.dataDir, digest), 20_000);
      const fromPg = await reg('GET', `/v2/cached/app/blobs/${digest}`);
      assert.equal(fromPg.raw.length, content.length);
      assert.notEqual(fromPg.raw[0], content[0]);
      // …whose bytes, not having the digest, are not cached.
      assert.equal(cached(keel.config.dataDir, digest), undefined);
      await flipFirstByte(digest);
      // A range read fills nothing; a whole read of the right bytes fills the cache again.
      assert.deepEqual((await reg('GET', `/v2/cached/app/blobs/${digest}`, { headers: { range: 'bytes=100-199' } })).raw, content.subarray(100, 200));
      assert.equal(cached(keel.config.dataDir, digest), undefined);
      assert.deepEqual((await reg('GET', `/v2/cached/app/blobs/${digest}`)).raw, content);
      assert.deepEqual(cached(keel.config.dataDir, digest), content);
      // A refused upload (wrong digest) leaves no copy and no temp file behind.
      const temps = cacheTemps();
      const wrong = await reg('POST', `/v2/cached/app/blobs/uploads/?digest=${sha('other')}`, { body: layer(1000, 2), headers: { 'content-type': 'application/octet-stream' } });
      assert.equal(wrong.status, 400);
      assert.equal(cached(keel.config.dataDir, sha(layer(1000, 2))), undefined);
      assert.deepEqual(cacheTemps(), temps);
    });

    test('a blob pushed through one process is cached by another that pulls it; once deleted and collected neither serves it; a bounded cache evicts; 0 turns it off', async () => {
      const second = await spawnKeel(keel.config.databaseUrl!, { KEEL_REGISTRY_CACHE_BYTES: '100000' });
      const off = await spawnKeel(keel.config.databaseUrl!, { KEEL_REGISTRY_CACHE_BYTES: '0' });
      try {
        const content = layer(30_000, 3);
        const { digest } = await pushBlob('shared/app', content);
        assert.equal(cached(second.dataDir, digest), undefined);
        assert.deepEqual((await reg('GET', `/v2/shared/app/blobs/${digest}`, { at: second.base })).raw, content);
        assert.deepEqual(cached(second.dataDir, digest), content);
        assert.deepEqual((await reg('GET', `/v2/shared/app/blobs/${digest}`, { at: second.base, headers: { range: 'bytes=29990-' } })).raw, content.subarray(29_990));
        // Deleted: the link goes first (both processes refuse at once), then gc the content and this process's copy.
        assert.equal((await reg('DELETE', `/v2/shared/app/blobs/${digest}`)).status, 202);
        for (const at of [base, second.base]) assert.equal((await reg('GET', `/v2/shared/app/blobs/${digest}`, { at })).status, 404);
        await gc('--grace-minutes', '0');
        assert.equal(cached(keel.config.dataDir, digest), undefined);
        assert.equal(await rawExec(keel, 'SELECT 1 FROM registry_blobs WHERE digest = ?', [digest]), 0);
        for (const at of [base, second.base]) {
          assert.equal((await reg('GET', `/v2/shared/app/blobs/${digest}`, { at })).status, 404);
          assert.equal((await reg('HEAD', `/v2/shared/app/blobs/${digest}`, { at })).status, 404);
        }
        // The bound: 100000 bytes hold two blobs of 40000, the least recently used goes.
        const blobs = [1, 2, 3].map((i) => layer(40_000, 10 + i));
        for (const b of blobs) await pushBlob('bounded/app', b);
        for (const b of blobs) assert.deepEqual((await reg('GET', `/v2/bounded/app/blobs/${sha(b)}`, { at: second.base })).raw, b);
        assert.ok(cacheBytes(second.dataDir) <= 100_000, `${cacheBytes(second.dataDir)} bytes cached`);
        assert.equal(cached(second.dataDir, sha(blobs[0])), undefined);
        assert.deepEqual(cached(second.dataDir, sha(blobs[2])), blobs[2]);
        // Pulled again, the first comes back and the least recently used other one goes.
        assert.deepEqual((await reg('GET', `/v2/bounded/app/blobs/${sha(blobs[0])}`, { at: second.base })).raw, blobs[0]);
        assert.deepEqual(cached(second.dataDir, sha(blobs[0])), blobs[0]);
        assert.equal(cached(second.dataDir, sha(blobs[1])), undefined);
        assert.ok(cacheBytes(second.dataDir) <= 100_000);
        // Off: pushes and pulls work, nothing is written to local disk.
        const plain = layer(20_000, 5);
        const res = await reg('POST', `/v2/plain/app/blobs/uploads/?digest=${sha(plain)}`, { at: off.base, body: plain, headers: { 'content-type': 'application/octet-stream' } });
        assert.equal(res.status, 201);
        assert.deepEqual((await reg('GET', `/v2/plain/app/blobs/${sha(plain)}`, { at: off.base })).raw, plain);
        assert.deepEqual((await reg('GET', `/v2/plain/app/blobs/${sha(plain)}`, { at: off.base, headers: { range: 'bytes=5-9' } })).raw, plain.subarray(5, 10));
        assert.equal(existsSync(join(off.dataDir, 'registry', 'cache')), false);
      } finally {
        await Promise.all([second.stop(), off.stop()]);
      }
    });
  }

  test('keel registry gc removes content no image refers to and keeps what images need', async () => {
    const kept = await pushBlob('gc/app', 'kept layer');
    const config = await pushBlob('gc/app', '{"gc":true}');
    assert.equal((await putManifest('gc/app', 'v1', manifestOf(config, [kept]))).status, 201);
    const orphan = await pushBlob('gc/app', 'orphan layer');
    // Within the grace period a blob no manifest names yet may be about to be named: it stays.
    await gc();
    assert.equal((await reg('HEAD', `/v2/gc/app/blobs/${orphan.digest}`)).status, 200);
    const out = await gc('--grace-minutes', '0');
    assert.match(out, /registry gc: removed \d+ unreferenced blobs/);
    assert.equal((await reg('HEAD', `/v2/gc/app/blobs/${orphan.digest}`)).status, 404);
    assert.equal((await reg('GET', `/v2/gc/app/blobs/${kept.digest}`)).raw.toString(), 'kept layer');
    assert.equal((await reg('GET', '/v2/gc/app/manifests/v1')).status, 200);
    if (backend === 'sqlite') {
      const file = (d: string) => join(keel.config.dataDir, 'registry', 'blobs', 'sha256', d.slice(7, 9), d.slice(7));
      assert.equal(existsSync(file(orphan.digest)), false);
      assert.equal(existsSync(file(kept.digest)), true);
    }
  });
});

forEachBackend(
  'registry: guessing keys',
  (backend) => {
    test('failed sign-ins count against the address like the rest of the API: 429 TOOMANYREQUESTS with Retry-After', async () => {
      const keel = await startKeel(backend, 'acme', { authFailureLimit: 3 });
      try {
        const base = await keel.listen();
        const guess = (key: string) => fetch(`${base}/v2/`, { headers: { authorization: `Basic ${Buffer.from(`u:${key}`).toString('base64')}` } });
        for (let i = 0; i < 3; i++) assert.equal((await guess(`wrong-${i}`)).status, 401);
        const limited = await guess('wrong-again');
        assert.equal(limited.status, 429);
        assert.equal(((await limited.json()) as any).errors[0].code, 'TOOMANYREQUESTS');
        assert.ok(Number(limited.headers.get('retry-after')) > 0);
      } finally {
        await keel.close();
      }
    });
  },
  ['sqlite'],
);
