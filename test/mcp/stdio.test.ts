// `keel mcp` over stdio, spawned as an agent's harness spawns it, driven by the SDK's own client.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { forEachBackend, startKeel, type Backend, type TestKeel } from '../support/keel.js';

const ROOT = join(import.meta.dirname, '..', '..');

async function spawnMcp(args: string[], env: Record<string, string> = {}): Promise<Client> {
  const client = new Client({ name: 'test-agent', version: '1.0.0' });
  const clean = Object.fromEntries(Object.entries(process.env).filter(([k, v]) => v !== undefined && !k.startsWith('CPLN_') && k !== 'KEEL_TOKEN')) as Record<string, string>;
  await client.connect(new StdioClientTransport({ command: process.execPath, args: ['--import', 'tsx', 'src/cli.ts', 'mcp', ...args], cwd: ROOT, env: { ...clean, ...env }, stderr: 'pipe' }));
  return client;
}

async function keyIn(k: TestKeel, name: string, group: string): Promise<string> {
  assert.equal((await k.call('POST', `/org/acme/serviceaccount`, { name })).status, 201);
  assert.equal((await k.call('PATCH', `/org/acme/group/${group}`, { '$append/memberLinks': [`/org/acme/serviceaccount/${name}`] })).status, 200);
  const res = await k.call('POST', `/org/acme/serviceaccount/${name}/-addKey`, {});
  assert.equal(res.status, 200, res.raw);
  return res.body.key;
}

forEachBackend('keel mcp over stdio', (backend: Backend) => {
  let k: TestKeel;
  let base: string;
  let home: string;
  before(async () => {
    k = await startKeel(backend);
    base = await k.listen();
    home = mkdtempSync(join(tmpdir(), 'keel-cpln-'));
  });
  after(async () => {
    rmSync(home, { recursive: true, force: true });
    await k.close();
  });

  test('with --endpoint and --token: the tools, a task done through them and checked over REST, audited under the key', async () => {
    const key = await keyIn(k, `stdio-agent-${backend}`, 'superusers');
    const client = await spawnMcp(['--endpoint', base, '--token', key]);
    try {
      const names = (await client.listTools()).tools.map((t) => t.name);
      for (const n of ['list_resources', 'get_resource', 'create_gvc', 'create_workload', 'delete_resource', 'keel_explain_forbidden']) assert.ok(names.includes(n), n);
      const made = await client.callTool({ name: 'create_gvc', arguments: { name: 'stdio-gvc', tags: { via: 'stdio' } } });
      assert.equal(made.isError, undefined, JSON.stringify(made));
      const rest = await k.call('GET', '/org/acme/gvc/stdio-gvc');
      assert.equal(rest.status, 200);
      assert.equal(rest.body.tags.via, 'stdio');
      const audit = await k.app.audit.inject({ method: 'GET', url: '/audit/org/acme?resourceType=gvc', headers: { authorization: `Bearer ${k.token}` } });
      const events = JSON.parse(audit.body).items.filter((e: unknown) => JSON.stringify(e).includes('/gvc/stdio-gvc'));
      assert.ok(events.length >= 1 && events.every((e: unknown) => JSON.stringify(e).includes(`/org/acme/serviceaccount/stdio-agent-${backend}`)), audit.body.slice(0, 800));
    } finally {
      await client.close();
    }
  });

  test('the token from KEEL_TOKEN, the endpoint and org from the default cpln profile; a view-only key is refused with nothing created', async () => {
    const viewer = await keyIn(k, `stdio-viewer-${backend}`, 'viewers');
    mkdirSync(join(home, 'profiles'), { recursive: true });
    writeFileSync(join(home, 'profiles', 'keel.json'), JSON.stringify({ name: 'keel', context: { org: 'acme' }, request: { endpoint: base, token: 'not-this-one' } }));
    writeFileSync(join(home, 'profiles', 'default'), 'keel');
    const client = await spawnMcp([], { CPLN_HOME: home, KEEL_TOKEN: viewer });
    try {
      const listed = await client.callTool({ name: 'list_resources', arguments: { kind: 'gvc' } });
      assert.equal(listed.isError, undefined, JSON.stringify(listed));
      const refused = await client.callTool({ name: 'create_gvc', arguments: { name: 'viewer-gvc' } });
      assert.equal(refused.isError, true);
      assert.match((refused.content as Array<{ text: string }>)[0].text, /not granted \[create\]/);
      assert.equal((await k.call('GET', '/org/acme/gvc/viewer-gvc')).status, 404);
    } finally {
      await client.close();
    }
  });

  test('the token from the profile; revoked mid-session, the next call is a tool error and nothing is created', async () => {
    const key = await keyIn(k, `stdio-doomed-${backend}`, 'superusers');
    mkdirSync(join(home, 'profiles'), { recursive: true });
    writeFileSync(join(home, 'profiles', 'other.json'), JSON.stringify({ name: 'other', context: { org: 'acme' }, request: { endpoint: base, token: key } }));
    const client = await spawnMcp(['--profile', 'other'], { CPLN_HOME: home });
    try {
      assert.equal((await client.callTool({ name: 'list_resources', arguments: { kind: 'gvc' } })).isError, undefined);
      assert.equal((await k.call('DELETE', `/org/acme/serviceaccount/stdio-doomed-${backend}`)).status, 202);
      const after = await client.callTool({ name: 'create_gvc', arguments: { name: 'after-revoke' } });
      assert.equal(after.isError, true);
      assert.equal((after.structuredContent as { code: string }).code, 'unauthorized');
      assert.equal((await k.call('GET', '/org/acme/gvc/after-revoke')).status, 404);
    } finally {
      await client.close();
    }
  });
});
