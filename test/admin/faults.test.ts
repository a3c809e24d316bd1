// Fault injection over HTTP, on both backends: rules set through /-admin/faults make matching
// requests fail with the error object, wait or lose their connection, counted and logged with the
// request id; reconciler scenarios keep items from getting well; off, none of it exists.
import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import { after, before, test } from 'node:test';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { waitFor } from '../support/wait.js';


forEachBackend('fault injection', (backend) => {
  let k: TestKeel;
  const logs: string[] = [];
  let viewer: string;
  before(async () => {
    const stream = new PassThrough();
    stream.on('data', (chunk) => logs.push(...String(chunk).split('\n').filter(Boolean)));
    k = await startKeel(backend, 'acme', { faults: true, reconcile: true, reconcileStepMs: 30, logLevel: 'warn' }, stream);
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'gv', spec: { staticPlacement: { locationLinks: ['//location/aws-us-west-2'] } } })).status, 201);
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name: 'viewer' })).status, 201);
    assert.equal((await k.call('PATCH', '/org/acme/group/viewers', { '$append/memberLinks': ['//serviceaccount/viewer'] })).status, 200);
    viewer = (await k.call('POST', '/org/acme/serviceaccount/viewer/-addKey', { description: 'v' })).body.key;
  });
  after(() => k.close());

  test('the next two GETs of a gvc get 503 service_unavailable with the error object; the third passes; hits and logs say so', async () => {
    const put = await k.call('PUT', '/-admin/faults', { rules: [{ name: 'gvc-503', method: 'get', kind: 'gvc', operation: 'get', status: 503, times: 2 }] });
    assert.equal(put.status, 200, put.raw);
    assert.deepEqual(put.body.rules, [{ name: 'gvc-503', method: 'GET', kind: 'gvc', operation: 'get', status: 503, times: 2, hits: 0 }]);
    assert.equal((await k.call('GET', '/org/acme/gvc')).status, 200, 'a list is another operation');
    const ids: string[] = [];
    for (let i = 0; i < 2; i++) {
      const res = await k.call('GET', '/org/acme/gvc/gv');
      assert.equal(res.status, 503);
      assert.deepEqual(Object.keys(res.body).sort(), ['code', 'details', 'id', 'message', 'status']);
      assert.equal(res.body.code, 'service_unavailable');
      assert.equal(res.headers['retry-after'], '1');
      ids.push(res.body.id);
    }
    assert.equal((await k.call('GET', '/org/acme/gvc/gv')).status, 200);
    assert.equal((await k.call('GET', '/-admin/faults')).body.rules[0].hits, 2);
    for (const id of ids) assert.ok(logs.some((l) => l.includes(id) && /fault/.test(l)), `a log line with request id ${id} and 'fault'`);
  });

  test('rules match by principal, path glob and operation; 409, 429 and 500 carry their codes; probability 0 never fires', async () => {
    const put = await k.call('PUT', '/-admin/faults', {
      rules: [
        { name: 'viewer-429', principal: '/org/acme/serviceaccount/viewer', status: 429 },
        { name: 'never', path: '*', status: 500, probability: 0 },
        { name: 'patch-409', operation: 'patch', path: '/org/acme/gvc/*', status: 409, message: 'someone else changed it' },
        { name: 'create-500', method: 'POST', path: '/org/acme/secret', status: 500 },
      ],
    });
    assert.equal(put.status, 200, put.raw);
    const limited = await k.call('GET', '/org/acme/gvc/gv', undefined, { token: viewer });
    assert.equal(limited.status, 429);
    assert.equal(limited.body.code, 'rate_limited');
    assert.doesNotMatch(limited.body.message, /quota/, 'the CLI retries a 429 unless it speaks of quota');
    assert.equal((await k.call('GET', '/org/acme/gvc/gv')).status, 200, 'the admin is another principal');
    const conflict = await k.call('PATCH', '/org/acme/gvc/gv', { description: 'x' });
    assert.equal(conflict.status, 409);
    assert.equal(conflict.body.code, 'conflict');
    assert.equal(conflict.body.message, 'someone else changed it');
    assert.notEqual((await k.call('GET', '/org/acme/gvc/gv')).body.description, 'x', 'the injected failure changed nothing');
    const failed = await k.call('POST', '/org/acme/secret', { name: 's1', type: 'opaque', data: { payload: 'x' } });
    assert.equal(failed.status, 500);
    assert.equal(failed.body.code, 'internal');
    assert.equal((await k.call('GET', '/org/acme/secret/s1')).status, 404);
    const rules = (await k.call('GET', '/-admin/faults')).body.rules;
    assert.deepEqual(
      rules.map((r: any) => [r.name, r.hits]),
      [['viewer-429', 1], ['never', 0], ['patch-409', 1], ['create-500', 1]],
    );
    assert.equal((await k.call('GET', '/-admin/faults')).status, 200, 'admin paths are never faulted');
    assert.equal((await k.call('DELETE', '/-admin/faults')).status, 202);
    assert.deepEqual((await k.call('GET', '/-admin/faults')).body.rules, []);
    assert.equal((await k.call('GET', '/org/acme/gvc/gv', undefined, { token: viewer })).status, 200);
  });

  test('added latency delays the answer; a dropped connection gets no answer at all', async () => {
    const base = await k.listen();
    const headers = { authorization: `Bearer ${k.token}` };
    assert.equal((await k.call('PUT', '/-admin/faults', { rules: [{ name: 'slow', path: '/org/acme/gvc/gv', latencyMs: 300 }, { name: 'cut', path: '/org/acme/gvc', method: 'GET', drop: true, times: 1 }] })).status, 200);
    const started = performance.now();
    const slow = await fetch(`${base}/org/acme/gvc/gv`, { headers });
    assert.equal(slow.status, 200);
    assert.ok(performance.now() - started >= 290, `took ${performance.now() - started} ms`);
    await assert.rejects(fetch(`${base}/org/acme/gvc`, { headers }), /fetch failed/);
    assert.equal((await fetch(`${base}/org/acme/gvc`, { headers })).status, 200, 'times: 1');
    assert.deepEqual((await k.call('GET', '/-admin/faults')).body.rules.map((r: any) => r.hits), [1, 1]);
    await k.call('DELETE', '/-admin/faults');
  });

  test('a path glob with ten stars against a long unauthenticated path is answered, matching or not (no backtracking)', async () => {
    const rules = [
      { name: 'never', path: '/*a*a*a*a*a*a*a*a*a*b', status: 500 },
      { name: 'console', path: '/*c*o*n*s*o*l*e*/*z*z', status: 409 },
    ];
    assert.equal((await k.call('PUT', '/-admin/faults', { rules })).status, 200);
    const long = `/console/${'a'.repeat(8000)}`;
    assert.notEqual((await k.call('GET', long, undefined, { token: null })).status, 500);
    const hit = await k.call('GET', `${long}zz`, undefined, { token: null });
    assert.equal(hit.status, 409);
    assert.deepEqual((await k.call('GET', '/-admin/faults')).body.rules.map((r: any) => r.hits), [0, 1]);
    await k.call('DELETE', '/-admin/faults');
  });

  test('malformed rules are 400 with field paths and leave the rules as they were; non-superusers get 403', async () => {
    assert.equal((await k.call('PUT', '/-admin/faults', { rules: [{ name: 'keep', path: '/nothing', status: 503 }] })).status, 200);
    const cases: Array<[unknown, string]> = [
      [{ rules: [{ status: 418 }] }, 'rules[0].status'],
      [{ rules: [{ status: 503, probability: 2 }] }, 'rules[0].probability'],
      [{ rules: [{ status: 503, times: 0 }] }, 'rules[0].times'],
      [{ rules: [{ status: 503, kind: 'nope' }] }, 'rules[0].kind'],
      [{ rules: [{ status: 503, operation: 'explode' }] }, 'rules[0].operation'],
      [{ rules: [{ status: 503, method: 'BREW' }] }, 'rules[0].method'],
      [{ rules: [{ latencyMs: 10_000_000 }] }, 'rules[0].latencyMs'],
      [{ rules: [{ status: 503, drop: true }] }, 'rules[0].drop'],
      [{ rules: [{ path: '/org/acme/gvc' }] }, 'rules[0]'],
      [{ rules: [{ scenario: 'meteorStrike' }] }, 'rules[0].scenario'],
      [{ rules: [{ scenario: 'domainStuck', status: 503 }] }, 'rules[0].status'],
      [{ rules: [{ status: 503, color: 'red' }] }, 'rules[0].color'],
      [{ rules: [{ status: 503, path: 'no-slash' }] }, 'rules[0].path'],
      [{ rules: [{ name: 'a', status: 503 }, { name: 'a', status: 500 }] }, 'rules[1].name'],
      [{ rules: 'all' }, 'rules'],
      [[1, 2], 'rules'],
      [{ rules: Array.from({ length: 101 }, () => ({ status: 503 })) }, 'rules'],
    ];
    for (const [body, path] of cases) {
      const res = await k.call('PUT', '/-admin/faults', body);
      assert.equal(res.status, 400, `${JSON.stringify(body).slice(0, 80)}: ${res.raw}`);
      assert.equal(res.body.code, 'bad_request');
      assert.ok(res.body.details.errors.some((e: any) => e.path === path), `${path} in ${JSON.stringify(res.body.details)}`);
    }
    const bad = await k.call('PUT', '/-admin/faults', undefined, { rawBody: '{"rules": [', headers: { 'content-type': 'application/json' } });
    assert.equal(bad.status, 400);
    assert.equal((await k.call('PUT', '/-admin/faults', { rules: [] }, { token: viewer })).status, 403);
    assert.equal((await k.call('GET', '/-admin/faults', undefined, { token: viewer })).status, 403);
    assert.deepEqual((await k.call('GET', '/-admin/faults')).body.rules.map((r: any) => r.name), ['keep']);
    await k.call('DELETE', '/-admin/faults');
  });

  test('scenarios: deployments that never become ready or fail to sync, a domain stuck before DNS, a command that fails', async () => {
    assert.equal(
      (await k.call('PUT', '/-admin/faults', {
        rules: [
          { scenario: 'deploymentNeverReady', kind: 'workload', path: '/org/acme/gvc/gv/workload/stuck' },
          { scenario: 'deploymentSyncFailed', path: '/org/acme/gvc/gv/workload/broken', message: 'image pull failed' },
          { scenario: 'domainStuck', kind: 'domain' },
          { scenario: 'commandFailed', path: '/org/acme/gvc/gv/workload/cron/-command/*', message: 'the job crashed' },
        ],
      })).status,
      200,
    );
    const workload = (name: string, type = 'standard') => ({ name, spec: { type, containers: [{ name: 'c', image: 'nginx' }], ...(type === 'cron' ? { job: { schedule: '0 * * * *' } } : {}) } });
    for (const name of ['fine', 'stuck', 'broken']) assert.equal((await k.call('POST', '/org/acme/gvc/gv/workload', workload(name))).status, 201);
    const deployments = (name: string) => k.call('GET', `/org/acme/gvc/gv/workload/${name}/deployment`).then((r) => r.body.items as any[]);
    await waitFor('the unfaulted workload to be ready', () => deployments('fine'), (d) => d.length === 1 && d[0].status.ready === true);
    // The reconciler has looked at the stuck one again and again (each look is a hit), and it is still not ready.
    const rules = () => k.call('GET', '/-admin/faults').then((r) => r.body.rules as any[]);
    await waitFor('repeated passes over the stuck workload', rules, (r) => r[0].hits >= 3);
    const stuck = await deployments('stuck');
    assert.equal(stuck.length, 1);
    assert.equal(stuck[0].status.ready, false);
    assert.equal(stuck[0].status.message, 'Deploying');
    const broken = await waitFor('the sync failure to show', () => deployments('broken'), (d) => d[0]?.status.message === 'Sync failed: image pull failed');
    assert.equal(broken[0].status.ready, false);
    assert.equal((await k.call('GET', '/org/acme/gvc/gv/workload/stuck')).body.status.ready, false);

    assert.equal((await k.call('POST', '/org/acme/domain', { name: 'app.example.com', spec: { dnsMode: 'cname', gvcLink: '//gvc/gv' } })).status, 201);
    await waitFor('the domain status', () => k.call('GET', '/org/acme/domain/app.example.com'), (r) => r.body.status?.status === 'pendingDnsConfig');

    assert.equal((await k.call('POST', '/org/acme/gvc/gv/workload', workload('cron', 'cron'))).status, 201);
    const run = await k.call('POST', '/org/acme/gvc/gv/workload/cron/-command', { type: 'runCronWorkload', spec: { location: 'aws-us-west-2' } });
    assert.ok([200, 201].includes(run.status), run.raw);
    const commandUrl = run.headers.location as string;
    assert.match(commandUrl, /^\/org\/acme\/gvc\/gv\/workload\/cron\/-command\//);
    const done = await waitFor('the command to end', () => k.call('GET', commandUrl), (r) => ['failed', 'completed'].includes(r.body.lifecycleStage));
    assert.equal(done.body.lifecycleStage, 'failed');
    assert.ok(done.body.status.messages.includes('the job crashed'), JSON.stringify(done.body.status));
    assert.equal((await k.call('GET', '/org/acme/domain/app.example.com')).body.status.status, 'pendingDnsConfig', 'still before DNS, many steps later');
    const hits = Object.fromEntries((await k.call('GET', '/-admin/faults')).body.rules.map((r: any) => [r.scenario, r.hits]));
    for (const scenario of ['deploymentNeverReady', 'deploymentSyncFailed', 'domainStuck', 'commandFailed']) assert.ok(hits[scenario] > 0, `${scenario}: ${hits[scenario]}`);
    assert.ok(logs.some((l) => /fault injected: domainStuck/.test(l)));
    await k.call('DELETE', '/-admin/faults');
  });
});

forEachBackend('fault injection off', (backend) => {
  let k: TestKeel;
  before(async () => (k = await startKeel(backend)));
  after(() => k.close());
  test('without KEEL_FAULTS=on /-admin/faults is 404 with the error object naming the setting', async () => {
    for (const method of ['GET', 'PUT', 'DELETE']) {
      const res = await k.call(method, '/-admin/faults', method === 'PUT' ? { rules: [{ status: 503 }] } : undefined);
      assert.equal(res.status, 404, res.raw);
      assert.equal(res.body.code, 'not_found');
      assert.match(res.body.message, /KEEL_FAULTS=on/);
    }
    assert.equal((await k.call('GET', '/org/acme/gvc')).status, 200);
  });
});
