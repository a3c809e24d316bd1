// The Core API as replicas reach it (CPLN_ENDPOINT, on the bridge's gateway) sees each replica's
// own address, so its per-address limits hold per replica: a replica that fails authentication
// again and again is limited (429), while a local client on 127.0.0.1 and another replica are
// not. A client cannot claim another address: a PROXY protocol header sent to the API's port is
// not believed (it is not HTTP, and is answered 400).
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { RuncRuntime } from '../../src/runtime/runc.js';
import { busyboxImage, runtimeMissing } from '../support/runtime.js';
import { LOCATION, startRuntimeKeel, type RuntimeKeel } from '../support/runtime-keel.js';
import { waitFor } from '../support/wait.js';

const skip = runtimeMissing();
/** Failed authentications an address may make in a minute (KEEL_AUTH_FAILURE_LIMIT), small for the test. */
const LIMIT = 5;
const BAD = 'Bearer keelwl_not-a-token-of-any-replica-at-all-000000000000';

describe('per-address limits of the Core API hold per replica (KEEL_RUNTIME=runc)', { skip }, () => {
  let rt: RuntimeKeel;
  let work: string;

  const exec = (workload: string, script: string) => rt.cpln.run(['workload', 'exec', workload, '--location', LOCATION, '--', 'sh', '-c', script], { timeoutMs: 60_000 });
  /** The statuses of `times` calls with a bad credential from inside `workload`'s replica, to CPLN_ENDPOINT. */
  const failFromReplica = async (workload: string, times: number) => {
    const r = await exec(workload, `for i in $(busybox seq ${times}); do busybox timeout 5 busybox wget -S -q -O /dev/null --header "Authorization: ${BAD}" "$CPLN_ENDPOINT/org/acme/gvc/web" 2>&1 | busybox grep -o 'HTTP/1.1 [0-9]*' | busybox head -n 1; done`);
    return [...r.stdout.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]));
  };
  const fromHost = async () => (await fetch(`http://127.0.0.1:${rt.port}/org/acme/gvc/web`, { headers: { authorization: BAD } })).status;
  const addressOf = (workload: string) => (rt.keel.app.core.runtime as unknown as RuncRuntime).replicasOf({ org: 'acme', gvc: 'web', workload, location: LOCATION })[0]?.address;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-api-address-'));
    const image = busyboxImage(work, 'idle', ['/bin/sh', '-c', 'exec sleep 1000000']);
    rt = await startRuntimeKeel({ settings: { authFailureLimit: LIMIT } });
    for (const name of ['noisy', 'quiet']) {
      const file = join(work, `${name}.json`);
      writeFileSync(file, JSON.stringify({ kind: 'workload', name, spec: { type: 'standard', containers: [{ name: 'main', image, cpu: '50m', memory: '32Mi' }], defaultOptions: { autoscaling: { minScale: 1, maxScale: 1 } } } }));
      await rt.run(['apply', '--file', file]);
    }
    for (const name of ['noisy', 'quiet']) {
      await waitFor(`${name} to be ready`, () => rt.deployment(name), (d) => d?.status?.ready === true, 90_000);
    }
  });
  after(async () => {
    await rt?.close();
    rmSync(work, { recursive: true, force: true });
  });

  test('a replica failing authentication is limited; 127.0.0.1 and another replica are not', async () => {
    assert.equal(await fromHost(), 401);
    const statuses = await failFromReplica('noisy', LIMIT + 3);
    assert.equal(statuses.length, LIMIT + 3, `every call answered: ${statuses}`);
    assert.deepEqual(statuses.slice(0, LIMIT), Array(LIMIT).fill(401), `${statuses}`);
    // The bucket refills one failure every 60/LIMIT s: the calls after the first LIMIT are refused, unless one came that late.
    assert.ok(statuses.slice(LIMIT).includes(429), `${statuses}`);
    // The replica's failures are its own: a local client and another replica still get to try.
    assert.equal(await fromHost(), 401, 'a local client is not limited for what a replica did');
    assert.deepEqual(await failFromReplica('quiet', 1), [401], 'another replica is not limited either');
  });

  test('misuse: a PROXY protocol header naming a replica, sent to the API port from loopback, is not believed', async () => {
    const replica = addressOf('quiet');
    assert.ok(replica, 'quiet has an address');
    const raw = (prefix: Buffer) =>
      new Promise<string>((resolve, reject) => {
        const s = connect(rt.port, '127.0.0.1', () => s.end(Buffer.concat([prefix, Buffer.from(`GET /org/acme/gvc/web HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: ${BAD}\r\nConnection: close\r\n\r\n`)])));
        let text = '';
        s.setEncoding('utf8');
        s.on('data', (chunk) => (text += chunk));
        s.on('end', () => resolve(text));
        s.on('error', reject);
      });
    const v1 = await raw(Buffer.from(`PROXY TCP4 ${replica} 127.0.0.1 40000 ${rt.port}\r\n`));
    assert.match(v1, /^HTTP\/1\.1 400 /, v1);
    assert.match(v1, /not valid HTTP/);
    // Version 2: the binary signature, TCP over IPv4, the replica's address as the source.
    const v2 = Buffer.concat([Buffer.from('0d0a0d0a000d0a515549540a', 'hex'), Buffer.from([0x21, 0x11, 0x00, 12]), Buffer.from(replica!.split('.').map(Number)), Buffer.from([127, 0, 0, 1]), Buffer.from([0x9c, 0x40, rt.port >> 8, rt.port & 0xff])]);
    const second = await raw(v2);
    assert.match(second, /^HTTP\/1\.1 400 /, second);
  });
});
