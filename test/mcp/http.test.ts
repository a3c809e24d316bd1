// The MCP server at /mcp, driven by the SDK's own client over streamable HTTP against a listening Keel.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { forEachBackend, startKeel, type Backend, type TestKeel } from '../support/keel.js';

async function connect(base: string, token: string, query = ''): Promise<Client> {
  const client = new Client({ name: 'test-agent', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${base}/mcp${query}`), { requestInit: { headers: { authorization: `Bearer ${token}` } } }));
  return client;
}

async function keyIn(k: TestKeel, name: string, group?: string): Promise<string> {
  assert.equal((await k.call('POST', `/org/acme/serviceaccount`, { name })).status, 201);
  if (group) assert.equal((await k.call('PATCH', `/org/acme/group/${group}`, { '$append/memberLinks': [`/org/acme/serviceaccount/${name}`] })).status, 200);
  const res = await k.call('POST', `/org/acme/serviceaccount/${name}/-addKey`, {});
  assert.equal(res.status, 200, res.raw);
  return res.body.key;
}

const HOSTED_CORE = ['list_resources', 'get_resource', 'delete_resource', 'get_resource_schema', 'get_permissions', 'create_gvc', 'update_gvc', 'create_workload', 'update_workload', 'list_deployments', 'get_workload_logs', 'create_policy', 'update_policy', 'create_identity', 'update_identity', 'create_volumeset', 'update_volumeset', 'create_domain', 'update_domain'];

const HOSTED_MK8S = ['aws', 'azure', 'digitalocean', 'gcp', 'generic', 'hetzner', 'lambdalabs', 'linode', 'oblivus', 'paperspace', 'triton'].flatMap((p) => [`create_mk8s_${p}`, `update_mk8s_${p}`]);
const HOSTED_FULL = ['create_group', 'edit_group', 'create_service_account', 'update_service_account', 'add_key_to_service_account', 'create_ipset', 'update_ipset', 'create_cloud_account', 'update_cloud_account', 'create_agent', 'update_agent', 'create_audit_context', 'edit_audit_context', 'get_quota', 'update_org', 'add_gvc_locations', 'remove_gvc_locations'];

forEachBackend('MCP over streamable HTTP', (backend: Backend) => {
  let k: TestKeel;
  let base: string;
  before(async () => {
    k = await startKeel(backend, 'acme', { allowSnapshots: true });
    base = await k.listen();
  });
  after(async () => k.close());

  test('the tool list: the hosted core names that map, with their argument schemas; ?toolsets= narrows it', async () => {
    const client = await connect(base, k.token);
    const { tools } = await client.listTools();
    const names = tools.map((t) => t.name);
    for (const n of HOSTED_CORE) assert.ok(names.includes(n), `${n} in ${names}`);
    for (const n of ['keel_reset', 'keel_snapshot_save', 'keel_snapshot_restore', 'keel_faults', 'keel_explain_forbidden', 'keel_apply', 'keel_reveal_secret']) assert.ok(names.includes(n), n);
    const list = tools.find((t) => t.name === 'list_resources')!;
    assert.deepEqual(list.inputSchema.required, ['kind']);
    assert.ok(list.inputSchema.properties && 'tags' in list.inputSchema.properties && 'gvc' in list.inputSchema.properties && 'org' in list.inputSchema.properties);
    const workload = tools.find((t) => t.name === 'create_workload')!;
    assert.deepEqual([...(workload.inputSchema.required as string[])].sort(), ['gvc', 'image', 'name']);
    await client.close();
    const core = await connect(base, k.token, '?toolsets=core');
    const coreNames = (await core.listTools()).tools.map((t) => t.name);
    assert.ok(coreNames.includes('list_resources') && !coreNames.includes('keel_reset'));
    await core.close();
    const resources = await (await connect(base, k.token)).listResources();
    assert.ok(resources.resources.some((r) => r.uri === 'keel://kinds/workload'));
  });

  test('without a valid credential: 401 before any MCP exchange; an unknown toolset is a 400', async () => {
    const init = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'x', version: '1' } } };
    for (const headers of [{}, { authorization: 'Bearer nonsense' }] as Array<Record<string, string>>) {
      const res = await fetch(`${base}/mcp`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers }, body: JSON.stringify(init) });
      assert.equal(res.status, 401);
      assert.equal(((await res.json()) as { code: string }).code, 'unauthorized');
    }
    const res = await fetch(`${base}/mcp?toolsets=bogus`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${k.token}` }, body: JSON.stringify(init) });
    assert.equal(res.status, 400);
    assert.match(((await res.json()) as { message: string }).message, /unknown toolset 'bogus'/);
  });

  test('a task done through tools only, cross-checked over REST, and audited under the caller', async () => {
    const key = await keyIn(k, `agent-${backend}`, 'superusers');
    const client = await connect(base, key);
    const gvc = await client.callTool({ name: 'create_gvc', arguments: { name: 'shop', tags: { team: 'a', tier: 'web' }, locations: ['aws-us-west-2'] } });
    assert.equal(gvc.isError, undefined, JSON.stringify(gvc));
    assert.equal((gvc.structuredContent as { name: string }).name, 'shop');
    const wl = await client.callTool({ name: 'create_workload', arguments: { name: 'web', gvc: 'shop', image: 'nginx:1.27', port: 80, env: { MODE: 'demo' } } });
    assert.equal(wl.isError, undefined, JSON.stringify(wl));
    const tagged = await client.callTool({ name: 'update_workload', arguments: { name: 'web', gvc: 'shop', tags: { owner: 'agent', gone: null } } });
    assert.equal(tagged.isError, undefined, JSON.stringify(tagged));
    // Over REST, as the superuser: what the tools made.
    const rest = await k.call('GET', '/org/acme/gvc/shop/workload/web');
    assert.equal(rest.status, 200);
    assert.equal(rest.body.spec.containers[0].image, 'nginx:1.27');
    assert.deepEqual(rest.body.spec.containers[0].env, [{ name: 'MODE', value: 'demo' }]);
    assert.equal(rest.body.tags.owner, 'agent');
    // list_resources with tags: all pairs must match.
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'other', tags: { team: 'a' } })).status, 201);
    const both = await client.callTool({ name: 'list_resources', arguments: { kind: 'gvc', tags: { team: 'a', tier: 'web' } } });
    assert.deepEqual((both.structuredContent as { items: Array<{ name: string }> }).items.map((i) => i.name), ['shop']);
    const one = await client.callTool({ name: 'list_resources', arguments: { kind: 'gvc', tags: { team: 'a' } } });
    assert.deepEqual((one.structuredContent as { items: Array<{ name: string }> }).items.map((i) => i.name).sort(), ['other', 'shop']);
    const got = await client.callTool({ name: 'get_resource', arguments: { kind: 'workload', gvc: 'shop', name: 'web' } });
    assert.equal(JSON.parse((got.content as Array<{ text: string }>)[0].text).name, 'web');
    // The audit events of the session: each change under the agent's key.
    const subject = `/org/acme/serviceaccount/agent-${backend}`;
    const audit = await k.app.audit.inject({ method: 'GET', url: '/audit/org/acme?resourceType=workload', headers: { authorization: `Bearer ${k.token}` } });
    const events = JSON.parse(audit.body).items.filter((e: { resource: { id?: string; link?: string }; }) => JSON.stringify(e.resource).includes('/gvc/shop/workload/web'));
    assert.ok(events.length >= 2, audit.body.slice(0, 1000));
    for (const e of events) assert.ok(JSON.stringify(e).includes(subject), JSON.stringify(e).slice(0, 600));
    const del = await client.callTool({ name: 'delete_resource', arguments: { kind: 'workload', gvc: 'shop', name: 'web' } });
    assert.equal(del.isError, undefined);
    assert.equal((await k.call('GET', '/org/acme/gvc/shop/workload/web')).status, 404);
    await client.close();
  });

  test('identities, volume sets and domains through their tools, cross-checked over REST; a secret\'s value only through keel_reveal_secret, and only with reveal', async () => {
    const client = await connect(base, k.token);
    const ok = (res: Awaited<ReturnType<Client['callTool']>>) => {
      assert.equal(res.isError, undefined, JSON.stringify(res));
      return res.structuredContent as Record<string, any>;
    };
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'kinds' })).status, 201);
    ok(await client.callTool({ name: 'create_identity', arguments: { name: 'app-id', gvc: 'kinds', description: 'for the app' } }));
    ok(await client.callTool({ name: 'update_identity', arguments: { name: 'app-id', gvc: 'kinds', tags: { team: 'a' } } }));
    const identity = await k.call('GET', '/org/acme/gvc/kinds/identity/app-id');
    assert.equal(identity.status, 200);
    assert.equal(identity.body.description, 'for the app');
    assert.equal(identity.body.tags.team, 'a');
    const vs = ok(await client.callTool({ name: 'create_volumeset', arguments: { name: 'data', gvc: 'kinds', spec: { initialCapacity: 10, performanceClass: 'general-purpose-ssd', fileSystemType: 'ext4' } } }));
    assert.equal(vs.spec.initialCapacity, 10);
    ok(await client.callTool({ name: 'update_volumeset', arguments: { name: 'data', gvc: 'kinds', spec: { initialCapacity: 20 } } }));
    assert.equal((await k.call('GET', '/org/acme/gvc/kinds/volumeset/data')).body.spec.initialCapacity, 20);
    const bad = await client.callTool({ name: 'create_volumeset', arguments: { name: 'bad', gvc: 'kinds', spec: { initialCapacity: 'lots' } } });
    assert.equal(bad.isError, true);
    assert.equal((await k.call('GET', '/org/acme/gvc/kinds/volumeset/bad')).status, 404);
    ok(await client.callTool({ name: 'create_domain', arguments: { name: 'app.example.com', description: 'the app' } }));
    ok(await client.callTool({ name: 'update_domain', arguments: { name: 'app.example.com', description: 'the shop' } }));
    assert.equal((await k.call('GET', '/org/acme/domain/app.example.com')).body.description, 'the shop');

    assert.equal((await k.call('POST', '/org/acme/secret', { name: `pw-${backend}`, type: 'opaque', data: { payload: 'hunter2', encoding: 'plain' } })).status, 201);
    const read = ok(await client.callTool({ name: 'get_resource', arguments: { kind: 'secret', name: `pw-${backend}` } }));
    assert.ok(!JSON.stringify(read).includes('hunter2'), JSON.stringify(read));
    const revealed = ok(await client.callTool({ name: 'keel_reveal_secret', arguments: { name: `pw-${backend}` } }));
    assert.equal(revealed.data.payload, 'hunter2');
    await client.close();
    const viewer = await connect(base, await keyIn(k, `secret-viewer-${backend}`, 'viewers'));
    const seen = ok(await viewer.callTool({ name: 'get_resource', arguments: { kind: 'secret', name: `pw-${backend}` } }));
    assert.ok(!JSON.stringify(seen).includes('hunter2'));
    const refused = await viewer.callTool({ name: 'keel_reveal_secret', arguments: { name: `pw-${backend}` } });
    assert.equal(refused.isError, true);
    assert.ok(!JSON.stringify(refused).includes('hunter2'));
    assert.equal((refused.structuredContent as { code: string }).code, 'forbidden');
    await viewer.close();
  });

  test('as a view-only key: each write is a tool error with Keel\'s message, nothing is created, and the 403 is explained', async () => {
    const key = await keyIn(k, `viewer-${backend}`, 'viewers');
    const client = await connect(base, key);
    const refused = await client.callTool({ name: 'create_gvc', arguments: { name: 'sneaky' } });
    assert.equal(refused.isError, true);
    const rest = await k.call('POST', '/org/acme/gvc', { name: 'sneaky' }, { token: key });
    assert.equal(rest.status, 403);
    assert.equal((refused.content as Array<{ text: string }>)[0].text, rest.body.message);
    assert.equal((refused.structuredContent as { code: string }).code, 'forbidden');
    assert.equal((await k.call('GET', '/org/acme/gvc/sneaky')).status, 404);
    const admin = await client.callTool({ name: 'keel_snapshot_save', arguments: { name: 'mine' } });
    assert.equal(admin.isError, true);
    assert.match((admin.content as Array<{ text: string }>)[0].text, /only a superuser/);
    const why = await client.callTool({ name: 'keel_explain_forbidden', arguments: { kind: 'gvc', name: 'sneaky', action: 'create' } });
    assert.equal(why.isError, undefined, JSON.stringify(why));
    const explained = why.structuredContent as { forbidden: boolean; permission: string[]; target: string; policies: Array<{ name: string }> };
    assert.equal(explained.forbidden, true);
    assert.deepEqual(explained.permission, ['create']);
    assert.ok(explained.policies.some((p) => p.name === 'viewers-gvc'), JSON.stringify(explained));
    await client.close();
  });

  test('arguments outside the schema and huge arguments are tool errors that change nothing', async () => {
    const client = await connect(base, k.token);
    const wrong = await client.callTool({ name: 'create_gvc', arguments: { name: 42 } });
    assert.equal(wrong.isError, true);
    assert.match((wrong.content as Array<{ text: string }>)[0].text, /name/);
    const huge = await client.callTool({ name: 'create_gvc', arguments: { name: 'big', description: 'x'.repeat(100_000) } });
    assert.equal(huge.isError, true);
    assert.equal((await k.call('GET', '/org/acme/gvc/big')).status, 404);
    const unknownKind = await client.callTool({ name: 'list_resources', arguments: { kind: 'nonsense' } });
    assert.equal(unknownKind.isError, true);
    assert.match((unknownKind.content as Array<{ text: string }>)[0].text, /unknown kind 'nonsense'/);
    await client.close();
  });

  test('the mk8s and full tiers: clusters, groups, service accounts and their keys, audit contexts and GVC locations through their tools, cross-checked over REST; the session\'s audit events come back from query_audit_events under the caller', async () => {
    const agent = `tiers-${backend}`;
    const key = await keyIn(k, agent, 'superusers');
    const client = await connect(base, key);
    const ok = (res: Awaited<ReturnType<Client['callTool']>>) => {
      assert.equal(res.isError, undefined, JSON.stringify(res));
      return res.structuredContent as Record<string, any>;
    };
    const names = (await client.listTools()).tools.map((t) => t.name);
    for (const n of [...HOSTED_MK8S, ...HOSTED_FULL, 'query_audit_events', 'list_quotas', 'list_commands', 'get_command', 'workload_start_cron', 'workload_stop_replica', 'expand_volumeset']) assert.ok(names.includes(n), n);
    const cluster = ok(await client.callTool({ name: 'create_mk8s_aws', arguments: { name: `k-${backend}`, version: '1.28.4', provider: { region: 'us-west-2', nodePools: [{ name: 'a', minSize: 1, maxSize: 2 }] }, firewall: [{ sourceCIDR: '10.0.0.0/8' }] } }));
    assert.equal(cluster.spec.provider.aws.region, 'us-west-2');
    ok(await client.callTool({ name: 'update_mk8s_aws', arguments: { name: `k-${backend}`, version: '1.29.0', tags: { env: 'dev' } } }));
    const rest = (await k.call('GET', `/org/acme/mk8s/k-${backend}`)).body;
    assert.equal(rest.spec.version, '1.29.0');
    assert.equal(rest.spec.provider.aws.region, 'us-west-2');
    assert.equal(rest.tags.env, 'dev');

    ok(await client.callTool({ name: 'create_service_account', arguments: { name: `bot-${backend}`, description: 'a bot' } }));
    ok(await client.callTool({ name: 'create_group', arguments: { name: `crew-${backend}`, memberLinks: [`/org/acme/serviceaccount/bot-${backend}`] } }));
    ok(await client.callTool({ name: 'edit_group', arguments: { name: `crew-${backend}`, description: 'the crew' } }));
    const group = (await k.call('GET', `/org/acme/group/crew-${backend}`)).body;
    assert.deepEqual(group.memberLinks, [`/org/acme/serviceaccount/bot-${backend}`]);
    assert.equal(group.description, 'the crew');
    const added = ok(await client.callTool({ name: 'add_key_to_service_account', arguments: { name: `bot-${backend}`, description: 'for ci' } }));
    assert.equal((await k.call('GET', `/org/acme/serviceaccount/bot-${backend}`, undefined, { token: added.key })).status, 403, 'the new key signs in as the bot, which may not read itself');

    assert.equal((await k.call('POST', '/org/acme/gvc', { name: `placed-${backend}`, spec: { staticPlacement: { locationLinks: ['/org/acme/location/aws-us-west-2'] } } })).status, 201);
    ok(await client.callTool({ name: 'add_gvc_locations', arguments: { name: `placed-${backend}`, locations: ['aws-eu-central-1', 'aws-us-west-2'] } }));
    assert.deepEqual((await k.call('GET', `/org/acme/gvc/placed-${backend}`)).body.spec.staticPlacement.locationLinks, ['/org/acme/location/aws-us-west-2', '/org/acme/location/aws-eu-central-1']);
    ok(await client.callTool({ name: 'remove_gvc_locations', arguments: { name: `placed-${backend}`, locations: ['aws-us-west-2'] } }));
    assert.deepEqual((await k.call('GET', `/org/acme/gvc/placed-${backend}`)).body.spec.staticPlacement.locationLinks, ['/org/acme/location/aws-eu-central-1']);
    // Racing calls: each either lands or is refused (409); no change that was answered as made is lost.
    const racing = ['aws-us-west-2', 'aws-us-east-2', 'aws-us-west-1', 'aws-eu-west-1'];
    const results = await Promise.all(racing.map((l) => client.callTool({ name: 'add_gvc_locations', arguments: { name: `placed-${backend}`, locations: [l] } })));
    const landed = racing.filter((_, i) => !results[i].isError);
    for (const [i, r] of results.entries()) if (r.isError) assert.match(JSON.stringify(r.content), /409|conflict|version/i, racing[i]);
    assert.ok(landed.length >= 1);
    const placed = (await k.call('GET', `/org/acme/gvc/placed-${backend}`)).body.spec.staticPlacement.locationLinks as string[];
    for (const l of landed) assert.ok(placed.includes(`/org/acme/location/${l}`), `${l} was answered as added: ${placed.join(', ')}`);

    ok(await client.callTool({ name: 'create_audit_context', arguments: { name: `ctx-${backend}` } }));
    assert.equal((await k.call('GET', `/org/acme/auditctx/ctx-${backend}`)).status, 200);

    // The session's changes, read back through the tool: each under this key, none under the admin.
    const events = ok(await client.callTool({ name: 'query_audit_events', arguments: { resourceType: 'mk8s', resourceName: `k-${backend}` } }));
    assert.deepEqual(events.items.map((e: { action: { type: string } }) => e.action.type), ['create', 'edit']);
    for (const e of events.items) assert.equal(e.subject.data.principalLink, `/org/acme/serviceaccount/${agent}`, JSON.stringify(e));
    const mine = ok(await client.callTool({ name: 'query_audit_events', arguments: { subject: agent, direction: 'backward', limit: 100 } }));
    assert.ok(mine.items.length >= 8, JSON.stringify(mine).slice(0, 400));
    assert.ok(mine.items.every((e: { subject: { name: string } }) => e.subject.name === agent));
    const bad = await client.callTool({ name: 'query_audit_events', arguments: { from: 'yesterday' } });
    assert.equal(bad.isError, true);
    assert.match((bad.content as Array<{ text: string }>)[0].text, /fromEvent must be an ISO 8601 time/);
    await client.close();

    const core = await connect(base, key, '?toolsets=core');
    const coreNames = (await core.listTools()).tools.map((t) => t.name);
    assert.ok(coreNames.includes('query_audit_events') && !coreNames.includes('create_mk8s_aws') && !coreNames.includes('create_group'));
    await core.close();
    const mk8s = await connect(base, key, '?toolsets=mk8s');
    const mk8sNames = (await mk8s.listTools()).tools.map((t) => t.name);
    assert.ok(mk8sNames.includes('get_resource') && mk8sNames.includes('create_mk8s_gcp') && !mk8sNames.includes('create_group') && !mk8sNames.includes('keel_reset'));
    await mk8s.close();
  });

  test('as a view-only key, the mk8s and full tier tools are refused with Keel\'s message and nothing is created', async () => {
    const key = await keyIn(k, `tier-viewer-${backend}`, 'viewers');
    const client = await connect(base, key);
    const attempts: Array<[string, Record<string, unknown>, string]> = [
      ['create_mk8s_gcp', { name: 'sneaky-k8s', version: '1.28.4', provider: { projectId: 'p' } }, '/org/acme/mk8s/sneaky-k8s'],
      ['create_group', { name: 'sneaky-group' }, '/org/acme/group/sneaky-group'],
      ['create_service_account', { name: 'sneaky-sa' }, '/org/acme/serviceaccount/sneaky-sa'],
      ['create_audit_context', { name: 'sneaky-ctx' }, '/org/acme/auditctx/sneaky-ctx'],
      ['add_key_to_service_account', { name: 'admin' }, ''],
    ];
    for (const [toolName, args, path] of attempts) {
      const refused = await client.callTool({ name: toolName, arguments: args });
      assert.equal(refused.isError, true, `${toolName}: ${JSON.stringify(refused)}`);
      assert.equal((refused.structuredContent as { code: string }).code, 'forbidden', toolName);
      if (path) assert.equal((await k.call('GET', path)).status, 404, path);
    }
    const keys = (await k.call('GET', '/org/acme/serviceaccount/admin')).body.keys ?? [];
    assert.ok(!keys.some((x: { description?: string }) => x.description === ''), 'no key was added to admin');
    await client.close();
  });

  test('a key revoked mid-session: the next call is refused 401 and nothing is created', async () => {
    const key = await keyIn(k, `doomed-${backend}`, 'superusers');
    const client = await connect(base, key);
    assert.equal((await client.callTool({ name: 'list_resources', arguments: { kind: 'gvc' } })).isError, undefined);
    assert.equal((await k.call('DELETE', `/org/acme/serviceaccount/doomed-${backend}`)).status, 202);
    await assert.rejects(client.callTool({ name: 'create_gvc', arguments: { name: 'after-revoke' } }), /401|unauthorized/i);
    assert.equal((await k.call('GET', '/org/acme/gvc/after-revoke')).status, 404);
  });
});

forEachBackend('MCP over streamable HTTP: a flood of calls from one key', (backend: Backend) => {
  let k: TestKeel;
  let base: string;
  before(async () => {
    k = await startKeel(backend, 'acme', { maxInFlightPerPrincipal: 4, faults: true });
    base = await k.listen();
  });
  after(async () => k.close());

  test('past its requests in flight, calls are refused with a clear error and nothing half-made; another caller is answered', async () => {
    const key = await keyIn(k, `flood-${backend}`, 'superusers');
    // Each create held a while, so the flood's calls are in flight together.
    assert.equal((await k.call('PUT', '/-admin/faults', { rules: [{ name: 'slow-creates', method: 'POST', kind: 'gvc', latencyMs: 300 }] })).status, 200);
    const client = await connect(base, key);
    const outcomes = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        client.callTool({ name: 'create_gvc', arguments: { name: `flood-${i}` } }).then(
          (r) => (r.isError ? `tool error: ${(r.content as Array<{ text: string }>)[0].text}` : 'ok'),
          (err: Error) => `refused: ${err.message}`,
        ),
      ),
    );
    const other = await k.call('GET', '/org/acme/gvc');
    assert.equal(other.status, 200);
    const refused = outcomes.filter((o) => o !== 'ok');
    assert.ok(refused.length > 0, 'some calls refused');
    for (const o of refused) assert.match(o, /in flight|too many|503|429/i, o);
    // Exactly the calls that succeeded made their GVC.
    const made = (other.body.items as Array<{ name: string }>).map((g) => g.name).filter((n) => n.startsWith('flood-'));
    assert.equal(made.length, outcomes.filter((o) => o === 'ok').length);
    await client.close();
  });
});

forEachBackend('MCP over streamable HTTP: a tool\'s reads, run in process as the caller', (backend: Backend) => {
  let k: TestKeel;
  let base: string;
  before(async () => {
    k = await startKeel(backend, 'acme', { faults: true });
    base = await k.listen();
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'seen' })).status, 201);
    assert.equal((await k.call('POST', '/org/acme/secret', { name: 'hidden', type: 'opaque', data: { payload: 'x', encoding: 'plain' } })).status, 201);
  });
  after(async () => k.close());
  const textOf = (res: Awaited<ReturnType<Client['callTool']>>) => (res.content as Array<{ text: string }>)[0].text;

  test('each answer is the REST call\'s: the item, a list as the key may see it, and every refusal\'s message and code', async () => {
    const nobody = await keyIn(k, `nobody-${backend}`);
    const viewer = await keyIn(k, `reader-${backend}`, 'viewers');
    const cases: Array<{ key: string; tool: string; args: Record<string, unknown>; path: string }> = [
      { key: viewer, tool: 'get_resource', args: { kind: 'gvc', name: 'seen' }, path: '/org/acme/gvc/seen' },
      { key: viewer, tool: 'list_resources', args: { kind: 'secret' }, path: '/org/acme/secret' },
      { key: nobody, tool: 'list_resources', args: { kind: 'secret' }, path: '/org/acme/secret' },
      { key: nobody, tool: 'get_resource', args: { kind: 'secret', name: 'hidden' }, path: '/org/acme/secret/hidden' },
      { key: viewer, tool: 'keel_reveal_secret', args: { name: 'hidden' }, path: '/org/acme/secret/hidden/-reveal' },
      { key: viewer, tool: 'get_resource', args: { kind: 'gvc', name: 'absent' }, path: '/org/acme/gvc/absent' },
      { key: viewer, tool: 'get_resource', args: { kind: 'gvc', name: 'seen', org: 'elsewhere' }, path: '/org/elsewhere/gvc/seen' },
      { key: viewer, tool: 'get_resource', args: { kind: 'workload', name: 'w', gvc: 'absent' }, path: '/org/acme/gvc/absent/workload/w' },
      { key: viewer, tool: 'get_resource', args: { kind: 'gvc', name: 'é'.repeat(200) }, path: `/org/acme/gvc/${encodeURIComponent('é'.repeat(200))}` },
      // Names the router gives to other routes than an item's (a static segment wins over a parameter), or decodes.
      { key: viewer, tool: 'get_resource', args: { kind: 'gvc', name: '-query' }, path: '/org/acme/gvc/-query' },
      { key: viewer, tool: 'get_resource', args: { kind: 'secret', name: '-schema' }, path: '/org/acme/secret/-schema' },
      { key: viewer, tool: 'get_resource', args: { kind: 'gvc', name: 'a/b' }, path: '/org/acme/gvc/a%2Fb' },
      { key: viewer, tool: 'get_resource', args: { kind: 'gvc', name: 'seen?x=1' }, path: '/org/acme/gvc/seen%3Fx%3D1' },
    ];
    for (const { key, tool, args, path } of cases) {
      const client = await connect(base, key);
      const res = await client.callTool({ name: tool, arguments: args });
      await client.close();
      const rest = await k.call('GET', path, undefined, { token: key });
      const label = `${tool} ${JSON.stringify(args)}: ${JSON.stringify(res)} against ${rest.status} ${rest.raw}`;
      if (rest.status >= 400) {
        assert.equal(res.isError, true, label);
        assert.equal(textOf(res), rest.body.message, label);
        const { id: _id, ...refusal } = rest.body;
        assert.deepEqual({ ...(res.structuredContent as object), id: undefined }, { message: rest.body.message, ...refusal, id: undefined }, label);
      } else {
        assert.equal(res.isError, undefined, label);
        // The REST answer's own text, passed on unchanged, and the same item as structuredContent.
        assert.equal(textOf(res), rest.raw, label);
        assert.deepEqual(res.structuredContent, rest.body, label);
      }
    }
  });

  test('writes too: a create, a patch and a delete land as over REST and are audited under the caller; each refusal (403, 400, 409) is the REST call\'s', async () => {
    const writer = `in-process-writer-${backend}`;
    const writerKey = await keyIn(k, writer, 'superusers');
    const viewer = await keyIn(k, `write-viewer-${backend}`, 'viewers');
    const nobody = await keyIn(k, `write-nobody-${backend}`);
    const client = await connect(base, writerKey);
    const created = await client.callTool({ name: 'create_gvc', arguments: { name: 'made', description: 'by a tool', tags: { team: 'a' } } });
    assert.equal(created.isError, undefined, JSON.stringify(created));
    // The tool's answer is the item as REST then presents it, to the byte.
    const afterCreate = await k.call('GET', '/org/acme/gvc/made', undefined, { token: writerKey });
    assert.equal(textOf(created), afterCreate.raw);
    assert.deepEqual(created.structuredContent, afterCreate.body);
    const patched = await client.callTool({ name: 'update_gvc', arguments: { name: 'made', description: 'changed', tags: { team: null, tier: 'web' } } });
    assert.equal(patched.isError, undefined, JSON.stringify(patched));
    const afterPatch = await k.call('GET', '/org/acme/gvc/made', undefined, { token: writerKey });
    assert.equal(textOf(patched), afterPatch.raw);
    assert.deepEqual(afterPatch.body.tags, { tier: 'web' });
    const deleted = await client.callTool({ name: 'delete_resource', arguments: { kind: 'gvc', name: 'made' } });
    assert.equal(deleted.isError, undefined, JSON.stringify(deleted));
    assert.equal((await k.call('GET', '/org/acme/gvc/made')).status, 404);
    await client.close();
    const audit = await k.app.audit.inject({ method: 'GET', url: '/audit/org/acme?resourceType=gvc&resourceName=made', headers: { authorization: `Bearer ${k.token}` } });
    const events = JSON.parse(audit.body).items as Array<{ action: { type: string }; subject: { data: { principalLink: string } } }>;
    assert.deepEqual(events.map((e) => e.action.type).sort(), ['create', 'delete', 'edit'], audit.body.slice(0, 600));
    for (const e of events) assert.equal(e.subject.data.principalLink, `/org/acme/serviceaccount/${writer}`);

    // Each refusal against the same write over REST: its status's code, message and details.
    const refusals: Array<{ key: string; tool: string; args: Record<string, unknown>; method: string; path: string; body?: unknown; status: number }> = [
      { key: viewer, tool: 'create_gvc', args: { name: 'sneaky' }, method: 'POST', path: '/org/acme/gvc', body: { name: 'sneaky', spec: {} }, status: 403 },
      { key: nobody, tool: 'update_gvc', args: { name: 'seen', description: 'mine' }, method: 'PATCH', path: '/org/acme/gvc/seen', body: { description: 'mine' }, status: 403 },
      { key: viewer, tool: 'delete_resource', args: { kind: 'gvc', name: 'seen' }, method: 'DELETE', path: '/org/acme/gvc/seen', status: 403 },
      { key: writerKey, tool: 'create_gvc', args: { name: 'Not A Name' }, method: 'POST', path: '/org/acme/gvc', body: { name: 'Not A Name', spec: {} }, status: 400 },
      { key: writerKey, tool: 'update_gvc', args: { name: 'seen', spec: { staticPlacement: 'everywhere' } }, method: 'PATCH', path: '/org/acme/gvc/seen', body: { spec: { staticPlacement: 'everywhere' } }, status: 400 },
      { key: writerKey, tool: 'create_gvc', args: { name: 'seen' }, method: 'POST', path: '/org/acme/gvc', body: { name: 'seen', spec: {} }, status: 409 },
      { key: writerKey, tool: 'create_gvc', args: { name: 'x', org: 'elsewhere' }, method: 'POST', path: '/org/elsewhere/gvc', body: { name: 'x', spec: {} }, status: 404 },
    ];
    for (const { key, tool, args, method, path, body, status } of refusals) {
      const agent = await connect(base, key);
      const res = await agent.callTool({ name: tool, arguments: args });
      await agent.close();
      const rest = await k.call(method, path, body, { token: key });
      const label = `${tool} ${JSON.stringify(args)}: ${JSON.stringify(res)} against ${rest.status} ${rest.raw}`;
      assert.equal(rest.status, status, label);
      assert.equal(res.isError, true, label);
      assert.equal(textOf(res), rest.body.message, label);
      assert.deepEqual({ ...(res.structuredContent as object), id: undefined }, { message: rest.body.message, ...rest.body, id: undefined }, label);
    }
    assert.equal((await k.call('GET', '/org/acme/gvc/sneaky')).status, 404);
    assert.equal((await k.call('GET', '/org/acme/gvc/seen')).body.description, 'seen', 'the refused patch changed nothing');
  });

  test('fault rules apply to them as to the REST call: a refusal carries the rule\'s error, a dropped request fails the call, and nothing else is touched', async () => {
    const client = await connect(base, k.token);
    assert.equal((await k.call('PUT', '/-admin/faults', { rules: [{ name: 'gvc-down', method: 'GET', path: '/org/acme/gvc/seen', status: 503 }] })).status, 200);
    const rest = await k.call('GET', '/org/acme/gvc/seen');
    assert.equal(rest.status, 503);
    const refused = await client.callTool({ name: 'get_resource', arguments: { kind: 'gvc', name: 'seen' } });
    assert.equal(refused.isError, true);
    assert.equal(textOf(refused), rest.body.message);
    assert.deepEqual((refused.structuredContent as { details: unknown }).details, { fault: 'gvc-down' });
    assert.equal((await k.call('PUT', '/-admin/faults', { rules: [{ name: 'gvc-gone', method: 'GET', kind: 'gvc', operation: 'get', drop: true }] })).status, 200);
    const dropped = await client.callTool({ name: 'get_resource', arguments: { kind: 'gvc', name: 'seen' } });
    assert.equal(dropped.isError, true);
    assert.match(textOf(dropped), /dropped \(fault rule 'gvc-gone'\)/);
    assert.equal((await client.callTool({ name: 'list_resources', arguments: { kind: 'gvc' } })).isError, undefined);
    assert.equal((await k.call('PUT', '/-admin/faults', { rules: [] })).status, 200);
    assert.equal((await client.callTool({ name: 'get_resource', arguments: { kind: 'gvc', name: 'seen' } })).isError, undefined);
    await client.close();
  });
});

/** One plain JSON-RPC POST to /mcp, as a client without the SDK sends it. */
async function rpc(base: string, token: string, body: unknown): Promise<{ status: number; body: any; headers: Headers }> {
  const res = await fetch(`${base}/mcp`, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${token}` }, body: JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined, headers: res.headers };
}

const toolCall = (id: number, name: string, args: Record<string, unknown>) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } });

forEachBackend('MCP over streamable HTTP: batches', (backend: Backend) => {
  let k: TestKeel;
  let base: string;
  before(async () => {
    k = await startKeel(backend, 'acme');
    base = await k.listen();
  });
  after(async () => k.close());

  test('a batch over MAX_BATCH_MESSAGES is refused whole, with a JSON-RPC error and nothing done; one at the cap is answered call by call', async () => {
    const over = Array.from({ length: 33 }, (_, i) => toolCall(i, 'create_gvc', { name: `over-${i}` }));
    const refused = await rpc(base, k.token, over);
    assert.equal(refused.status, 400);
    assert.equal(refused.body.error.code, -32600);
    assert.match(refused.body.error.message, /at most 32 messages; this one holds 33/);
    const gvcs = (await k.call('GET', '/org/acme/gvc')).body.items as Array<{ name: string }>;
    assert.deepEqual(gvcs.filter((g) => g.name.startsWith('over-')), []);
    const atCap = await rpc(base, k.token, Array.from({ length: 32 }, (_, i) => toolCall(i, 'get_resource', { kind: 'gvc', name: `absent-${i}` })));
    assert.equal(atCap.status, 200);
    assert.deepEqual(atCap.body.map((a: { id: number }) => a.id), Array.from({ length: 32 }, (_, i) => i));
    for (const answer of atCap.body) assert.equal(answer.result.structuredContent.code, 'not_found');
  });
});

forEachBackend('MCP over streamable HTTP: a batch against the rate limit', (backend: Backend) => {
  let k: TestKeel;
  let base: string;
  let key: string;
  before(async () => {
    // One request a second, eight at once: a batch's calls cost what as many POSTs would.
    k = await startKeel(backend, 'acme', { rateLimit: 1, rateBurst: 8 });
    base = await k.listen();
    key = await keyIn(k, `batcher-${backend}`, 'superusers');
  });
  after(async () => k.close());

  test('a batch of N calls costs N: past the caller\'s tokens, or past a burst, it is refused whole with 429 and nothing done', async () => {
    const gvcsNamed = async (prefix: string) => ((await k.call('GET', '/org/acme/gvc')).body.items as Array<{ name: string }>).filter((g) => g.name.startsWith(prefix));
    const tooBig = await rpc(base, key, Array.from({ length: 9 }, (_, i) => toolCall(i, 'create_gvc', { name: `big-${i}` })));
    assert.equal(tooBig.status, 429);
    assert.equal(tooBig.body.code, 'rate_limited');
    assert.match(tooBig.body.message, /batch of 9 messages is more than .*rateBurst: 8/);
    assert.deepEqual(await gvcsNamed('big-'), []);
    // 7 tokens left (the refused POST took one): a batch of 6 takes 6.
    const reads = await rpc(base, key, Array.from({ length: 6 }, (_, i) => toolCall(i, 'list_resources', { kind: 'gvc' })));
    assert.equal(reads.status, 200, JSON.stringify(reads.body));
    assert.equal(reads.body.length, 6);
    // One token left, not the six a second batch needs: refused, with when to retry, and none of it made.
    const writes = await rpc(base, key, Array.from({ length: 6 }, (_, i) => toolCall(i, 'create_gvc', { name: `late-${i}` })));
    assert.equal(writes.status, 429, JSON.stringify(writes.body));
    assert.equal(writes.body.code, 'rate_limited');
    assert.ok(Number(writes.headers.get('retry-after')) >= 1);
    assert.deepEqual(await gvcsNamed('late-'), []);
  });
});

forEachBackend('MCP over streamable HTTP: a body a tool builds past bodyLimit', (backend: Backend) => {
  let k: TestKeel;
  let base: string;
  before(async () => {
    k = await startKeel(backend, 'acme', { bodyLimit: 1024 });
    base = await k.listen();
  });
  after(async () => k.close());

  test('is refused 413 as the same body over REST is, and nothing is made', async () => {
    // Short location names in a small call, each made a link: the create's body is larger than the call.
    const locations = Array.from({ length: 40 }, (_, i) => `l${String(i).padStart(3, '0')}`);
    const call = await rpc(base, k.token, toolCall(1, 'create_gvc', { name: 'wide', locations }));
    assert.equal(call.status, 200, JSON.stringify(call.body));
    const result = call.body.result;
    const body = { name: 'wide', spec: { staticPlacement: { locationLinks: locations.map((l) => `/org/acme/location/${l}`) } } };
    assert.ok(JSON.stringify(body).length > 1024);
    const rest = await k.call('POST', '/org/acme/gvc', body);
    assert.equal(rest.status, 413);
    assert.equal(result.isError, true, JSON.stringify(result));
    assert.equal(result.content[0].text, rest.body.message);
    assert.deepEqual({ ...result.structuredContent, id: undefined }, { message: rest.body.message, ...rest.body, id: undefined });
    assert.equal((await k.call('GET', '/org/acme/gvc/wide')).status, 404);
  });

  test('a call whose arguments hold text no store can hold (a NUL, a lone surrogate) is refused 400 with the reason, and nothing is made', async () => {
    for (const [name, description] of [['nul', 'a\u0000b'], ['half', 'a\ud800b']]) {
      const call = await rpc(base, k.token, toolCall(1, 'create_gvc', { name, description }));
      assert.equal(call.status, 400, JSON.stringify(call.body));
      assert.equal(call.body.code, 'bad_request');
      assert.match(call.body.message, /NUL characters or unpaired surrogates/);
      assert.equal((await k.call('GET', `/org/acme/gvc/${name}`)).status, 404);
    }
  });
});

forEachBackend('MCP over streamable HTTP: a flood of write batches', (backend: Backend) => {
  const KEYS = 20;
  const CALLS = 32;
  let k: TestKeel;
  let base: string;
  let flooders: string[];
  let bystander: string;
  before(async () => {
    // Few mutation seats, so the flood's calls wait for them: who goes first is the scheduler's choice.
    k = await startKeel(backend, 'acme', { maxMutationsInFlight: 2 });
    base = await k.listen();
    // Neither the flooders nor the bystander are superusers (who are never held): both wait their turn.
    assert.equal((await k.call('POST', '/org/acme/group', { name: 'gvc-makers' })).status, 201);
    const policy = { name: 'gvc-makers', targetKind: 'gvc', target: 'all', bindings: [{ permissions: ['create', 'view'], principalLinks: ['/org/acme/group/gvc-makers'] }] };
    assert.equal((await k.call('POST', '/org/acme/policy', policy)).status, 201);
    flooders = await Promise.all(Array.from({ length: KEYS }, (_, i) => keyIn(k, `flooder-${i}`, 'gvc-makers')));
    bystander = await keyIn(k, 'bystander', 'gvc-makers');
  });
  after(async () => k.close());

  /** The bystander's create over REST; its answer's status. */
  const bystanderWrites = async (name: string) => {
    const res = await fetch(`${base}/org/acme/gvc`, { method: 'POST', headers: { authorization: `Bearer ${bystander}`, 'content-type': 'application/json' }, body: JSON.stringify({ name }) });
    await res.text();
    return res.status;
  };
  /** How many other creates were made between each of the bystander's creates (named `by-…`) and the one before it. */
  const createsBetween = async (): Promise<number[]> => {
    const creates = (await k.store.audit({ org: 'acme', resourceType: 'gvc', actionType: 'create', limit: 10_000 })).sort((a, b) => a.seq - b.seq);
    const mine = creates.flatMap((e, i) => (e.resourceName.startsWith('by-') ? [i] : []));
    return mine.slice(1).map((at, n) => at - mine[n] - 1);
  };

  test("20 keys' 32-call write batches at once: the bystander's REST writes all land, each after a bounded share of the flood; every call is done or refused whole", async () => {
    // Its quiet baseline: nothing else is written between its creates.
    for (let i = 0; i < 5; i++) assert.equal(await bystanderWrites(`by-quiet-${i}`), 201);
    assert.deepEqual(await createsBetween(), [0, 0, 0, 0]);

    let flooding = true;
    const flood = Promise.all(
      flooders.map((key, f) => rpc(base, key, Array.from({ length: CALLS }, (_, i) => toolCall(i, 'create_gvc', { name: `flood-${f}-${i}` })))),
    ).finally(() => (flooding = false));
    // The bystander writes one after another for as long as the flood lasts.
    const statuses: number[] = [];
    for (let i = 0; flooding || i < 3; i++) statuses.push(await bystanderWrites(`by-busy-${i}`));
    const answers = await flood;

    assert.ok(statuses.every((s) => s === 201), JSON.stringify(statuses));
    // With 20 principals ahead in the queue, a fair scheduler lets each of the bystander's writes in
    // after about one call of each (and those running; the first, after those made before it arrived):
    // far fewer than the flood's 640 calls, which a first-come order (or calls that bypassed the
    // scheduler) would put before its first write.
    const between = (await createsBetween()).slice(4);
    const label = `flood creates between the bystander's: ${JSON.stringify(between)}`;
    assert.ok(between.length >= 3, label);
    assert.ok(Math.max(...between) <= (KEYS * CALLS) / 4, label);
    assert.ok([...between].sort((a, b) => a - b)[between.length >> 1] <= 2 * KEYS, label);

    const made = new Set(((await k.store.audit({ org: 'acme', resourceType: 'gvc', actionType: 'create', limit: 10_000 })) as Array<{ resourceName: string }>).map((e) => e.resourceName));
    let done = 0;
    for (const [f, answer] of answers.entries()) {
      assert.equal(answer.status, 200, JSON.stringify(answer.body));
      assert.deepEqual(answer.body.map((a: { id: number }) => a.id), Array.from({ length: CALLS }, (_, i) => i));
      for (const [i, { result }] of (answer.body as Array<{ result: { isError?: boolean; content: Array<{ text: string }>; structuredContent: { code?: string; name?: string } } }>).entries()) {
        const name = `flood-${f}-${i}`;
        const exists = (await k.call('GET', `/org/acme/gvc/${name}`)).status === 200;
        if (result.isError) {
          // Refused whole: a message that says why and when to retry, and nothing made.
          assert.match(result.content[0].text, /retry/, JSON.stringify(result));
          assert.ok(result.structuredContent.code, JSON.stringify(result));
          assert.ok(!exists && !made.has(name), `${name} refused yet made`);
        } else {
          assert.equal(result.structuredContent.name, name);
          assert.ok(exists && made.has(name), `${name} answered made, yet not there`);
          done++;
        }
      }
    }
    assert.ok(done > 0, 'no call of the flood was done');
  });
});
