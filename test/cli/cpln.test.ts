// The official cpln CLI (npm @controlplane/cli, pinned) against Keel on a real socket: every
// command group `cpln --help` lists, and every subcommand that needs neither a container runtime
// nor a browser, checked by what it prints. Commands that need one end quickly with a clear
// message, and no command ever reaches a host other than Keel (the guard refuses and records it).
// One server (SQLite, reconcilers on with short steps); steps run in order and build on each other.
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { parse as parseYaml, parseAllDocuments } from 'yaml';
import { Cpln, type CplnResult } from '../support/cpln.js';
import { freePort } from '../support/ports.js';
import { startKeel, type TestKeel } from '../support/keel.js';

let keel: TestKeel;
let cpln: Cpln;
let endpoint: string;
const commands = new Set<string>();
let steps = 0;

/** Runs one CLI command as a step: it must finish in time, reach only Keel and exit as expected. */
async function run(args: string[], options: { code?: number | number[]; input?: string; timeoutMs?: number; env?: Record<string, string>; phonesHome?: RegExp } = {}): Promise<CplnResult> {
  const words = args.filter((a) => !a.startsWith('-'));
  commands.add(words.slice(0, ['workload', 'volumeset', 'w'].includes(words[0]) && ['cron', 'replica', 'snapshot', 'volume'].includes(words[1]) ? 3 : 2).join(' '));
  steps++;
  const result = await cpln.run(args, { timeoutMs: options.timeoutMs ?? 45_000, input: options.input, env: options.env });
  const shown = `cpln ${args.join(' ')}\n--- exit ${result.code}${result.timedOut ? ' (timed out)' : ''} in ${result.ms} ms\n--- stdout\n${result.stdout}\n--- stderr\n${result.stderr}`;
  assert.equal(result.timedOut, false, `timed out:\n${shown}`);
  assert.deepEqual(result.foreign.filter((f) => !options.phonesHome?.test(f)), [], `reached beyond Keel:\n${shown}`);
  assert.doesNotMatch(result.stderr, /\n\s+at .+\(.*\.js:\d+:\d+\)/, `printed a stack trace:\n${shown}`);
  assert.ok([options.code ?? 0].flat().includes(result.code!), `exit ${result.code}, expected ${String(options.code ?? 0)}:\n${shown}`);
  return result;
}

const json = async (args: string[]) => JSON.parse((await run([...args, '-o', 'json'])).stdout);
const yaml = async (args: string[]) => parseYaml((await run([...args, '-o', 'yaml'])).stdout);
/** A step that must fail with the API's error object (printed as JSON on stderr). */
async function refused(args: string[], code: string, message?: RegExp): Promise<void> {
  const result = await run([...args, '-o', 'json'], { code: 1 });
  const errors = JSON.parse(result.stderr.slice(result.stderr.indexOf('[')));
  assert.equal(errors[0].code, code, result.stderr);
  if (message) assert.match(errors[0].message, message);
}
function file(name: string, text: string): string {
  const path = join(cpln.home, name);
  writeFileSync(path, text);
  return path;
}
const names = (list: { items: Array<{ name: string }> }) => list.items.map((i) => i.name);

/** Polls a CLI read until `ready` holds (the reconcilers move status along in the background). */
async function until<T>(read: () => Promise<T>, ready: (value: T) => boolean, what: string, deadlineMs = 30_000): Promise<T> {
  const end = Date.now() + deadlineMs;
  for (;;) {
    const value = await read();
    if (ready(value)) return value;
    if (Date.now() > end) assert.fail(`${what}: not reached within ${deadlineMs} ms; last: ${JSON.stringify(value).slice(0, 2000)}`);
  }
}

/**
 * The CLI's browser sign-in listens on the fixed port 48794 before it reads /discovery; another
 * run (or a closing connection that used the port) can hold it, so wait until it can be bound.
 */
async function cliLoginPortFree(): Promise<void> {
  const end = Date.now() + 90_000;
  const bindable = () => new Promise<boolean>((resolve) => {
    const server = createServer().once('error', () => resolve(false));
    server.listen(48794, () => server.close(() => resolve(true)));
  });
  while (!(await bindable())) {
    if (Date.now() > end) assert.fail('port 48794 (the CLI login server) stayed busy');
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

describe('the official cpln CLI against Keel', () => {
  before(async () => {
    const port = await freePort();
    const auditPort = await freePort();
    keel = await startKeel('sqlite', 'acme', { port, auditPort, reconcile: true, reconcileStepMs: 150 });
    await keel.app.core.listen({ host: '127.0.0.1', port });
    await keel.app.audit.listen({ host: '127.0.0.1', port: auditPort });
    endpoint = `http://127.0.0.1:${port}`;
    cpln = new Cpln([`127.0.0.1:${port}`, `127.0.0.1:${auditPort}`]);
    const updated = await run(['profile', 'update', 'keel', '--endpoint', endpoint, '--token', keel.token, '--org', 'acme', '--gvc', 'web', '--default']);
    assert.match(updated.stdout, /keel\s*\|\[admin\]\s*\|\*/);
    await run(['gvc', 'create', '--name', 'web', '--location', 'aws-us-east-2', '--location', 'gcp-us-east1', '--env', 'STAGE=prod']);
  });
  after(async () => {
    console.log(`# cpln CLI suite: ${commands.size} commands in ${steps} steps`);
    cpln?.cleanup();
    await keel?.close();
  });

  test('profile: a key signs in without a browser; profiles are managed locally', async () => {
    const profiles = await json(['profile', 'get']);
    assert.equal(profiles[0].request.endpoint, endpoint);
    assert.equal((await run(['profile', 'token', 'keel'])).stdout, keel.token);
    await run(['profile', 'update', 'spare', '--endpoint', endpoint, '--token', keel.token, '--org', 'acme']);
    await run(['profile', 'set-default', 'keel']);
    assert.match((await run(['profile', 'get'])).stdout, /spare/);
    await run(['profile', 'delete', 'spare']);
    assert.doesNotMatch((await run(['profile', 'get'])).stdout, /spare/);
  });

  test('login: Keel signs in with keys, so the browser sign-in stops at once', async () => {
    // Every form that reads the profile's endpoint asks Keel's /discovery for the browser sign-in
    // configuration; Keel has none (firebase: null), and the CLI stops with its own message.
    for (const args of [['profile', 'login', 'keel'], ['login', 'keel'], ['profile', 'update', 'keel', '--login']]) {
      await cliLoginPortFree();
      const login = await run(args, { code: 1, timeoutMs: 20_000 });
      assert.equal(login.stderr, "Cannot read properties of null (reading 'apiKey')");
      assert.doesNotMatch(login.stderr + login.stdout, /opened your browser/);
    }
    assert.equal((await run(['profile', 'token', 'keel'])).stdout, keel.token, 'a refused sign-in keeps the key');
    // Without a profile name the CLI signs in to the hosted service: its built-in endpoint, which
    // neither --endpoint nor CPLN_ENDPOINT changes. It never asks Keel (the guard refuses it).
    await cliLoginPortFree();
    const hosted = await cpln.run(['login'], { timeoutMs: 10_000, env: { CPLN_ENDPOINT: endpoint } });
    steps++;
    commands.add('login');
    assert.ok(hosted.foreign.some((f) => /^(LOOKUP api\.cpln\.io|REFUSED api\.cpln\.io:443)/.test(f)), hosted.foreign.join('\n'));
    assert.doesNotMatch(hosted.stderr, /opened your browser/);
  });

  test('org and account: get, update, tag, query, permissions, access report, event log, audit, exports, create through billing', async () => {
    assert.deepEqual(names(await json(['org', 'get'])), ['acme']);
    assert.equal((await yaml(['org', 'get', 'acme'])).name, 'acme');
    assert.equal((await json(['org', 'update', 'acme', '--set', 'description=Acme Inc'])).description, 'Acme Inc');
    assert.equal((await json(['org', 'tag', 'acme', '--tag', 'team=core'])).items[0].tags.team, 'core');
    assert.deepEqual(names(await json(['org', 'query'])), ['acme']);
    assert.match((await run(['org', 'permissions'])).stdout, /readLogs/);
    assert.match((await run(['org', 'access-report', 'acme'])).stdout, /superusers/);
    assert.ok((await json(['org', 'eventlog', 'acme'])).items.length >= 1);
    assert.match((await run(['org', 'audit', 'acme', '-o', 'json'])).stdout, /"acme"/);
    const patched = await json(['org', 'patch', 'acme', '-f', file('org-patch.yaml', 'description: patched\n')]);
    assert.equal(patched.description, 'patched');
    const accounts = await json(['account', 'get']);
    assert.equal(accounts.items.length, 1);
    const accountId = accounts.items[0].id;
    assert.equal((await json(['account', 'get', accountId])).id, accountId);
    const created = await json(['org', 'create', '--accountId', accountId, '--name', 'beta', '--invitee', 'ada@example.com']);
    assert.equal(created.name, 'beta');
    assert.deepEqual(names(await json(['org', 'get'])), ['acme', 'beta']);
    assert.deepEqual(names(await json(['user', 'get', '--org', 'beta'])), ['ada@example.com']);
    await refused(['org', 'create', '--accountId', 'no-such-account', '--name', 'gamma', '--invitee', 'ada@example.com'], 'not_found', /the accounts of your orgs are listed at GET \/account/);
    const tf = (await run(['org', 'get', 'acme', '-o', 'tf'])).stdout;
    assert.match(tf, /^resource "cpln_org" "acme" \{\n {2}name = "acme"\n {2}description = "patched"\n/);
    const crd = parseYaml((await run(['org', 'get', 'acme', '-o', 'crd'])).stdout);
    assert.deepEqual([crd.apiVersion, crd.kind, crd.metadata.name, crd.tags.team], ['cpln.io/v1', 'org', 'acme', 'core']);
  });

  test('gvc: create, get in every output format, update, locations, tag, clone, query, reports, exports, delete', async () => {
    const gvc = await json(['gvc', 'get', 'web']);
    assert.deepEqual(gvc.spec.env, [{ name: 'STAGE', value: 'prod' }]);
    assert.deepEqual(gvc.spec.staticPlacement.locationLinks, ['/org/acme/location/aws-us-east-2', '/org/acme/location/gcp-us-east1']);
    assert.match((await run(['gvc', 'get', 'web'])).stdout, /NAME\s*\|.*\n.*\n\|web\s*\|/);
    assert.equal((await run(['gvc', 'get', '-o', 'names'])).stdout, 'web');
    const slim = await run(['gvc', 'get', 'web', '-o', 'json-slim']);
    assert.equal(JSON.parse(slim.stdout).id, undefined);
    assert.equal((await json(['gvc', 'update', 'web', '--set', 'description=the web gvc'])).description, 'the web gvc');
    assert.equal((await json(['gvc', 'add-location', 'web', '--location', 'azure-eastus2'])).spec.staticPlacement.locationLinks.length, 3);
    assert.equal((await json(['gvc', 'remove-location', 'web', '--location', 'azure-eastus2'])).spec.staticPlacement.locationLinks.length, 2);
    assert.equal((await json(['gvc', 'tag', 'web', '--tag', 'tier=front'])).items[0].tags.tier, 'front');
    assert.equal((await json(['gvc', 'clone', 'web', '--name', 'web-copy'])).name, 'web-copy');
    await run(['gvc', 'tag', 'web-copy', '--tag', 'tier=front']);
    assert.deepEqual(names(await json(['gvc', 'query', '--tag', 'tier=front'])), ['web', 'web-copy']);
    assert.match((await run(['gvc', 'permissions'])).stdout, /edit/);
    assert.match((await run(['gvc', 'access-report', 'web'])).stdout, /manage/);
    assert.ok((await json(['gvc', 'eventlog', 'web'])).items.length >= 2);
    assert.match((await run(['gvc', 'audit', 'web', '-o', 'json'])).stdout, /"web"/);
    const tf = (await run(['gvc', 'get', '-o', 'tf'])).stdout;
    assert.match(tf, /resource "cpln_gvc" "web" \{[\s\S]*static_placement \{\n {6}location_links = \["\/org\/acme\/location\/aws-us-east-2", "\/org\/acme\/location\/gcp-us-east1"\]/);
    assert.match(tf, /resource "cpln_gvc" "web-copy"/);
    const crds = parseAllDocuments((await run(['gvc', 'get', '-o', 'crd'])).stdout).map((d) => d.toJS());
    assert.deepEqual(crds.map((c) => c.metadata.name), ['web', 'web-copy']);
    assert.deepEqual(crds[0].spec.staticPlacement.locationLinks, ['//location/aws-us-east-2', '//location/gcp-us-east1']);
    await run(['gvc', 'delete', 'web-copy']);
    await refused(['gvc', 'get', 'web-copy'], 'not_found');
  });

  test('identity, secrets (every create-* variant), cloud accounts (every create-*), service accounts and keys', async () => {
    const identity = await json(['identity', 'create', '--name', 'app']);
    assert.equal(identity.links.find((l: { rel: string }) => l.rel === 'gvc').href, '/org/acme/gvc/web');
    assert.equal((await json(['identity', 'update', 'app', '--set', 'description=app identity'])).description, 'app identity');
    assert.deepEqual(names(await json(['identity', 'get'])), ['app']);
    assert.deepEqual(names(await json(['identity', 'query', '--gvc', 'web'])), ['app']);
    assert.match((await run(['identity', 'permissions'])).stdout, /use/);
    assert.match((await run(['identity', 'access-report', 'app'])).stdout, /manage/);
    assert.equal((await json(['identity', 'tag', 'app', '--tag', 'k=v'])).items[0].tags.k, 'v');
    assert.ok((await json(['identity', 'eventlog', 'app'])).items.length >= 2);

    const pem = file('key.pem', '-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n');
    const cert = file('cert.pem', '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n');
    const variants: Array<[string, string[], string]> = [
      ['create-opaque', ['--file', file('payload.txt', 'hello'), '--encoding', 'plain'], 'opaque'],
      ['create-dictionary', ['--entry', 'a=1', '--entry', 'b=2'], 'dictionary'],
      ['create-aws', ['--access-key', 'AKIAIOSFODNN7EXAMPLE', '--secret-key', 'wJalrXUtnFEMI/K7MDENG'], 'aws'],
      ['create-ecr', ['--access-key', 'AKIAIOSFODNN7EXAMPLE', '--secret-key', 'wJalrXUtnFEMI/K7MDENG', '--repo', '123456789012.dkr.ecr.us-east-1.amazonaws.com/app'], 'ecr'],
      ['create-azure-connector', ['--url', 'https://fn.example.com/api', '--code', 'c0de'], 'azure-connector'],
      ['create-azure-sdk', ['--file', file('azure.json', JSON.stringify({ subscriptionId: 's', tenantId: 't', clientId: 'c', clientSecret: 'x' }))], 'azure-sdk'],
      ['create-gcp', ['--file', file('gcp.json', JSON.stringify({ type: 'service_account', project_id: 'p', private_key_id: 'k', private_key: 'pk', client_email: 'a@p.iam.gserviceaccount.com' }))], 'gcp'],
      ['create-docker', ['--file', file('docker.json', JSON.stringify({ auths: { 'registry.example.com': { auth: 'dXNlcjpwYXNz' } } }))], 'docker'],
      ['create-keypair', ['--secret', pem, '--public', file('key.pub', 'ssh-ed25519 AAAA keel')], 'keypair'],
      ['create-nats', ['--account-id', 'ACCOUNTID', '--private-key', 'SAPRIVATEKEY'], 'nats-account'],
      ['create-tls', ['--key', pem, '--cert', cert], 'tls'],
      ['create-userpass', ['--username', 'ada', '--password', 's3cret'], 'userpass'],
    ];
    for (const [variant, flags, type] of variants) {
      const created = await json(['secret', variant, '--name', `s-${type}`, ...flags]);
      assert.equal(created.type, type, variant);
      assert.equal(created.data, undefined, `${variant}: a plain read hides the data`);
    }
    assert.equal((await run(['secret', 'reveal', 's-opaque', '-o', 'smart'])).stdout, 'hello');
    assert.deepEqual((await json(['secret', 'reveal', 's-dictionary'])).data, { a: '1', b: '2' });
    assert.equal((await json(['secret', 'update', 's-userpass', '--set', 'description=login'])).description, 'login');
    assert.equal((await json(['secret', 'clone', 's-opaque', '--name', 's-copy'])).type, 'opaque');
    assert.equal((await json(['secret', 'tag', 's-copy', '--tag', 'k=v'])).items[0].tags.k, 'v');
    assert.deepEqual(names(await json(['secret', 'query', '--prop', 'type=opaque'])), ['s-copy', 's-opaque']);
    assert.match((await run(['secret', 'permissions'])).stdout, /reveal/);
    assert.match((await run(['secret', 'access-report', 's-copy'])).stdout, /reveal/);
    assert.ok((await json(['secret', 'eventlog', 's-copy'])).items.length >= 1);
    await run(['secret', 'delete', 's-copy']);
    await refused(['secret', 'get', 's-copy'], 'not_found');
    await run(['rest', 'get', '-o', 'json', '/org/acme/secret/-for/type/userpass']).then((r) => assert.deepEqual(names(JSON.parse(r.stdout)), ['s-userpass']));

    const how = await run(['cloudaccount', 'create-aws', '--how']);
    assert.match(how.stdout, /Keel records aws cloud accounts/);
    assert.match((await run(['cloudaccount', 'create-gcp', '--how'])).stdout, /Keel records gcp cloud accounts/);
    assert.equal((await json(['cloudaccount', 'create-aws', '--name', 'ca-aws', '--role-arn', 'arn:aws:iam::123456789012:role/cpln'])).provider, 'aws');
    assert.equal((await json(['cloudaccount', 'create-gcp', '--name', 'ca-gcp', '--project-id', 'my-project-123'])).provider, 'gcp');
    assert.equal((await json(['cloudaccount', 'create-azure', '--name', 'ca-azure', '--secret', 'azure-conn', '--url', 'https://fn.example.com/api', '--code', 'c0de'])).provider, 'azure');
    assert.equal((await json(['cloudaccount', 'create-ngs', '--name', 'ca-ngs', '--secret', 's-nats-account'])).provider, 'ngs');
    assert.deepEqual(names(await json(['cloudaccount', 'get'])), ['ca-aws', 'ca-azure', 'ca-gcp', 'ca-ngs']);
    assert.equal((await json(['cloudaccount', 'tag', 'ca-aws', '--tag', 'k=v'])).items[0].tags.k, 'v');
    assert.deepEqual(names(await json(['cloudaccount', 'query', '--prop', 'provider=gcp'])), ['ca-gcp']);
    assert.match((await run(['cloudaccount', 'permissions'])).stdout, /view/);
    assert.match((await run(['cloudaccount', 'access-report', 'ca-aws'])).stdout, /manage/);
    assert.ok((await json(['cloudaccount', 'eventlog', 'ca-aws'])).items.length >= 1);
    await run(['cloudaccount', 'delete', 'ca-ngs']);

    assert.equal((await json(['serviceaccount', 'create', '--name', 'ci'])).name, 'ci');
    const key = await json(['serviceaccount', 'add-key', 'ci', '--description', 'pipeline']);
    assert.match(key.key, /^s[a-z2-7]{15}\./);
    assert.equal((await json(['serviceaccount', 'get', 'ci'])).keys.length, 1);
    await run(['serviceaccount', 'remove-key', 'ci', '--key', key.key.split('.')[0]]);
    assert.deepEqual((await json(['serviceaccount', 'get', 'ci'])).keys ?? [], []);
    assert.equal((await json(['serviceaccount', 'clone', 'ci', '--name', 'ci-copy'])).name, 'ci-copy');
    assert.equal((await json(['serviceaccount', 'tag', 'ci', '--tag', 'k=v'])).items[0].tags.k, 'v');
    assert.ok(names(await json(['serviceaccount', 'query', '--prop', 'name~ci'])).includes('ci-copy'));
    assert.match((await run(['serviceaccount', 'permissions'])).stdout, /addKey/);
    assert.match((await run(['serviceaccount', 'access-report', 'ci'])).stdout, /manage/);
    assert.ok((await json(['serviceaccount', 'eventlog', 'ci'])).items.length >= 2);
    await run(['serviceaccount', 'delete', 'ci-copy']);
  });

  test('groups, members, policies and bindings, users, tasks, quotas, audit contexts', async () => {
    await run(['user', 'invite', '--email', 'grace@example.com']);
    assert.ok(names(await json(['user', 'get'])).includes('grace@example.com'));
    assert.equal((await json(['group', 'create', '--name', 'devs', '--desc', 'developers'])).description, 'developers');
    const added = await json(['group', 'add-member', 'devs', '--serviceaccount', 'ci', '--email', 'grace@example.com']);
    assert.deepEqual(added.memberLinks, ['/org/acme/user/grace@example.com', '/org/acme/serviceaccount/ci']);
    const removed = await json(['group', 'remove-member', 'devs', '--email', 'grace@example.com']);
    assert.deepEqual(removed.memberLinks, ['/org/acme/serviceaccount/ci']);
    assert.equal((await json(['group', 'update', 'devs', '--set', 'description=the devs'])).description, 'the devs');
    assert.equal((await json(['group', 'clone', 'devs', '--name', 'devs-copy'])).name, 'devs-copy');
    assert.equal((await json(['group', 'tag', 'devs', '--tag', 'k=v'])).items[0].tags.k, 'v');
    assert.ok(names(await json(['group', 'query', '--prop', 'name~devs'])).includes('devs-copy'));
    assert.match((await run(['group', 'permissions'])).stdout, /manage/);
    assert.match((await run(['group', 'access-report', 'devs'])).stdout, /manage/);
    assert.ok((await json(['group', 'eventlog', 'devs'])).items.length >= 3);
    await run(['group', 'delete', 'devs-copy']);

    const policy = await json(['policy', 'create', '--name', 'gvc-editors', '--target-kind', 'gvc', '--resource', 'web']);
    assert.deepEqual(policy.targetLinks, ['/org/acme/gvc/web']);
    const bound = await json(['policy', 'add-binding', 'gvc-editors', '--permission', 'edit', '--group', 'devs', '--serviceaccount', 'ci', '--identity', 'app', '--gvc', 'web']);
    assert.deepEqual(bound.bindings[0].permissions, ['edit']);
    assert.equal(bound.bindings[0].principalLinks.length, 3);
    const unbound = await json(['policy', 'remove-binding', 'gvc-editors', '--permission', 'edit', '--serviceaccount', 'ci']);
    assert.equal(unbound.bindings[0].principalLinks.length, 2);
    assert.equal((await json(['policy', 'update', 'gvc-editors', '--set', 'description=edit web'])).description, 'edit web');
    assert.equal((await json(['policy', 'clone', 'gvc-editors', '--name', 'gvc-editors-copy'])).targetKind, 'gvc');
    assert.equal((await json(['policy', 'tag', 'gvc-editors', '--tag', 'k=v'])).items[0].tags.k, 'v');
    assert.deepEqual(names(await json(['policy', 'query', '--prop', 'targetKind=gvc', '--prop', 'name~editors'])), ['gvc-editors', 'gvc-editors-copy']);
    assert.match((await run(['policy', 'permissions'])).stdout, /manage/);
    assert.match((await run(['policy', 'access-report', 'gvc-editors'])).stdout, /manage/);
    assert.ok((await json(['policy', 'eventlog', 'gvc-editors'])).items.length >= 3);
    await run(['policy', 'delete', 'gvc-editors-copy']);

    assert.equal((await json(['user', 'update', 'grace@example.com', '--set', 'tags.role=dev'])).tags.role, 'dev');
    assert.equal((await json(['user', 'tag', 'grace@example.com', '--tag', 'k=v'])).items[0].tags.k, 'v');
    assert.deepEqual(names(await json(['user', 'query', '--prop', 'email~grace'])), ['grace@example.com']);
    assert.match((await run(['user', 'permissions'])).stdout, /impersonate/);
    assert.match((await run(['user', 'access-report', 'grace@example.com'])).stdout, /manage/);
    assert.ok((await json(['user', 'eventlog', 'grace@example.com'])).items.length >= 1);
    await run(['user', 'delete', 'grace@example.com']);

    assert.deepEqual((await json(['task', 'get'])).items, []);
    assert.deepEqual((await json(['task', 'get-mine'])).items, []);
    assert.deepEqual((await json(['task', 'query'])).items, []);
    assert.match((await run(['task', 'permissions'])).stdout, /manage/);
    assert.deepEqual((await json(['quota', 'get'])).kind, 'list');
    assert.deepEqual((await json(['quota', 'query'])).kind, 'queryresult');
    assert.match((await run(['quota', 'permissions'])).stdout, /view/);

    assert.equal((await json(['auditctx', 'create', '--name', 'deploys'])).name, 'deploys');
    assert.deepEqual(names(await json(['auditctx', 'get'])), ['cpln', 'deploys']);
    assert.equal((await json(['auditctx', 'update', 'deploys', '--set', 'description=deploy events'])).description, 'deploy events');
    assert.equal((await json(['auditctx', 'clone', 'deploys', '--name', 'deploys-copy'])).name, 'deploys-copy');
    assert.equal((await json(['auditctx', 'tag', 'deploys', '--tag', 'k=v'])).items[0].tags.k, 'v');
    assert.ok(names(await json(['auditctx', 'query', '--prop', 'name~deploys'])).includes('deploys-copy'));
    assert.match((await run(['auditctx', 'permissions'])).stdout, /writeLog|manage/);
    assert.match((await run(['auditctx', 'access-report', 'deploys'])).stdout, /manage/);
    assert.ok((await json(['auditctx', 'eventlog', 'deploys'])).items.length >= 1);
  });

  test('domains, IP sets, locations, agents, mk8s, images', async () => {
    assert.equal((await json(['domain', 'create', '--name', 'shop.example.com'])).name, 'shop.example.com');
    assert.equal((await json(['domain', 'tag', 'shop.example.com', '--tag', 'k=v'])).items[0].tags.k, 'v');
    assert.deepEqual(names(await json(['domain', 'get'])), ['shop.example.com']);
    assert.deepEqual(names(await json(['domain', 'query', '--prop', 'name~shop'])), ['shop.example.com']);
    assert.match((await run(['domain', 'permissions'])).stdout, /manage/);
    assert.match((await run(['domain', 'access-report', 'shop.example.com'])).stdout, /manage/);
    assert.ok((await json(['domain', 'eventlog', 'shop.example.com'])).items.length >= 1);
    assert.match((await run(['domain', 'get', 'shop.example.com', '-o', 'tf'])).stdout, /^resource "cpln_domain" "shop_example_com" \{/);
    await run(['domain', 'delete', 'shop.example.com']);

    const ipset = await json(['ipset', 'create', '--name', 'egress', '--location', 'aws-us-east-2,keep']);
    assert.equal(ipset.spec.locations[0].retentionPolicy, 'keep');
    assert.equal((await json(['ipset', 'add-location', 'egress', '--location', 'gcp-us-east1'])).spec.locations.length, 2);
    assert.equal((await json(['ipset', 'update-location', 'egress', '--location', 'gcp-us-east1,free'])).spec.locations[1].retentionPolicy, 'free');
    assert.equal((await json(['ipset', 'remove-location', 'egress', '--location', 'gcp-us-east1'])).spec.locations.length, 1);
    assert.equal((await json(['ipset', 'update', 'egress', '--set', 'description=egress ips'])).description, 'egress ips');
    assert.equal((await json(['ipset', 'clone', 'egress', '--name', 'egress-copy'])).name, 'egress-copy');
    assert.equal((await json(['ipset', 'tag', 'egress', '--tag', 'k=v'])).items[0].tags.k, 'v');
    assert.deepEqual(names(await json(['ipset', 'query', '--prop', 'name~egress'])), ['egress', 'egress-copy']);
    assert.match((await run(['ipset', 'permissions'])).stdout, /manage/);
    assert.match((await run(['ipset', 'access-report', 'egress'])).stdout, /manage/);
    assert.ok((await json(['ipset', 'eventlog', 'egress'])).items.length >= 2);
    await run(['ipset', 'delete', 'egress-copy']);

    assert.ok(names(await json(['location', 'get'])).includes('aws-us-east-2'));
    assert.equal((await json(['location', 'get', 'aws-us-east-2'])).provider, 'aws');
    assert.ok(names(await json(['location', 'query', '--prop', 'provider=gcp'])).includes('gcp-us-east1'));
    assert.match((await run(['location', 'permissions'])).stdout, /manage/);
    assert.match((await run(['location', 'access-report', 'aws-us-east-2'])).stdout, /manage/);
    const byok = await json(['location', 'create', '--name', 'on-prem']);
    assert.equal(byok.provider, 'byok');
    assert.equal((await json(['location', 'tag', 'on-prem', '--tag', 'k=v'])).items[0].tags.k, 'v');
    const install = await run(['location', 'install', 'on-prem'], { code: 1 });
    assert.match(install.stderr, /install/);
    await run(['location', 'delete', 'on-prem']);

    const bootstrap = await run(['agent', 'create', '--name', 'vpn', '-o', 'json']);
    const agent = await until(() => json(['agent', 'get', 'vpn']), (a) => Boolean(a.status?.bootstrapConfig), 'agent bootstrap');
    assert.equal(agent.status.bootstrapConfig.agentLink, '/org/acme/agent/vpn');
    assert.ok(bootstrap.code === 0);
    assert.match((await run(['agent', 'info', 'vpn'])).stdout, /no agent process is connected/);
    assert.equal((await json(['agent', 'update', 'vpn', '--set', 'description=office vpn'])).description, 'office vpn');
    assert.equal((await json(['agent', 'tag', 'vpn', '--tag', 'k=v'])).items[0].tags.k, 'v');
    assert.deepEqual(names(await json(['agent', 'query', '--prop', 'name=vpn'])), ['vpn']);
    assert.match((await run(['agent', 'permissions'])).stdout, /use/);
    assert.match((await run(['agent', 'access-report', 'vpn'])).stdout, /manage/);
    assert.ok((await json(['agent', 'eventlog', 'vpn'])).items.length >= 1);
    const bootstrapFile = file('bootstrap.json', JSON.stringify({ ...agent.status.bootstrapConfig, protocolVersion: 'v2' }));
    const manifest = await run(['agent', 'manifest', '--bootstrap-file', bootstrapFile, '--namespace', 'net']);
    assert.deepEqual(parseAllDocuments(manifest.stdout).map((d) => d.toJS().kind), ['Namespace', 'Secret', 'Deployment']);
    const up = await run(['agent', 'up', '--bootstrap-file', bootstrapFile], { code: 1 });
    assert.match(up.stderr, /agent up is not available/);
    await run(['agent', 'delete', 'vpn']);

    const cluster = file('mk8s.yaml', 'kind: mk8s\nname: k1\nspec:\n  version: 1.28.4\n  provider:\n    generic:\n      location: aws-us-east-2\n');
    assert.match((await run(['apply', '-f', cluster])).stdout, /Created \/org\/acme\/mk8s\/k1/);
    assert.deepEqual(names(await json(['mk8s', 'get'])), ['k1']);
    assert.equal((await json(['mk8s', 'update', 'k1', '--set', 'description=cluster one'])).description, 'cluster one');
    assert.equal((await json(['mk8s', 'tag', 'k1', '--tag', 'k=v'])).items[0].tags.k, 'v');
    assert.deepEqual(names(await json(['mk8s', 'query', '--prop', 'name=k1'])), ['k1']);
    assert.match((await run(['mk8s', 'permissions'])).stdout, /manage/);
    assert.match((await run(['mk8s', 'access-report', 'k1'])).stdout, /manage/);
    assert.ok((await json(['mk8s', 'eventlog', 'k1'])).items.length >= 1);
    // Its kubeconfig names the server the cluster reports and its CA (a real certificate Keel keeps per cluster).
    const cluster1 = await until(() => json(['mk8s', 'get', 'k1']), (c) => Boolean(c.status?.serverUrl), 'cluster server url');
    const kubeconfig = parseYaml((await run(['mk8s', 'kubeconfig', 'k1', '--file', '-'])).stdout);
    assert.equal(kubeconfig.clusters[0].cluster.server, cluster1.status.serverUrl);
    assert.match(Buffer.from(kubeconfig.clusters[0].cluster['certificate-authority-data'], 'base64').toString(), /BEGIN CERTIFICATE/);
    // join prints the node script Keel serves (which, run on a node, says there is nothing to join).
    assert.match((await run(['mk8s', 'join', 'k1', '--type', 'join-script'])).stdout, /^#!\/bin\/sh[\s\S]*no control plane to join[\s\S]*exit 1/);
    assert.match((await run(['mk8s', 'join', 'k1', '--type', 'cloud-init'])).stdout, /no control plane to join/);
    assert.equal((await json(['mk8s', 'clone', 'k1', '--name', 'k2'])).name, 'k2');
    await run(['mk8s', 'delete', 'k2']);

    assert.deepEqual((await json(['image', 'get'])).items, []);
    assert.deepEqual((await json(['image', 'query'])).items, []);
    assert.match((await run(['image', 'permissions'])).stdout, /pull/);
  });

  test('apply and delete -f with a multi-document file of many kinds; rest', async () => {
    const docs = [
      'kind: secret\nname: app-config\ntype: dictionary\ndata:\n  LEVEL: debug\n',
      'kind: gvc\nname: batch\nspec:\n  staticPlacement:\n    locationLinks:\n      - //location/aws-us-east-2\n',
      'kind: identity\nname: batch-id\ngvc: batch\n',
      'kind: volumeset\nname: scratch\ngvc: batch\nspec:\n  initialCapacity: 10\n  performanceClass: general-purpose-ssd\n  fileSystemType: ext4\n',
      'kind: workload\nname: worker\ngvc: batch\nspec:\n  type: standard\n  identityLink: //identity/batch-id\n  containers:\n    - name: main\n      image: busybox:1.36\n      cpu: 50m\n      memory: 128Mi\n      ports:\n        - number: 8080\n          protocol: http\n',
      'kind: policy\nname: batch-readers\ntargetKind: workload\ntarget: all\n',
      'kind: group\nname: batchers\n',
    ];
    const path = file('stack.yaml', docs.join('---\n'));
    const applied = await run(['apply', '-f', path]);
    for (const link of ['/org/acme/secret/app-config', '/org/acme/gvc/batch', '/org/acme/gvc/batch/identity/batch-id', '/org/acme/gvc/batch/volumeset/scratch', '/org/acme/gvc/batch/workload/worker', '/org/acme/policy/batch-readers', '/org/acme/group/batchers']) {
      assert.match(applied.stdout, new RegExp(`Created ${link}\\b`));
    }
    const again = await run(['apply', '-f', path]);
    assert.match(again.stdout, /Updated workload 'worker'/);
    assert.doesNotMatch(again.stdout, /Created/);
    const bad = await run(['apply', '-f', file('bad.yaml', 'kind: gvc\nname: Not_Valid\n')], { code: 1 });
    assert.match(bad.stderr, /bad_request/);
    const deleted = await run(['delete', '-f', path]);
    for (const kind of ['workload', 'volumeset', 'identity', 'gvc', 'policy', 'group', 'secret']) assert.match(deleted.stdout, new RegExp(`Deleted ${kind} '`));
    await refused(['gvc', 'get', 'batch'], 'not_found');

    assert.equal(JSON.parse((await run(['rest', 'get', '-o', 'json', '/org/acme'])).stdout).name, 'acme');
    const posted = JSON.parse((await run(['rest', 'post', '-o', 'json', '/org/acme/group', '-f', file('g.json', '{"name":"rest-made"}')])).stdout);
    assert.equal(posted.name, 'rest-made');
    assert.equal(JSON.parse((await run(['rest', 'patch', '-o', 'json', '/org/acme/group/rest-made', '-f', file('p.json', '{"description":"patched"}')])).stdout).description, 'patched');
    assert.equal(JSON.parse((await run(['rest', 'put', '-o', 'json', '/org/acme/group/rest-made', '-f', file('u.json', '{"name":"rest-made","description":"put"}')])).stdout).description, 'put');
    assert.equal(JSON.parse((await run(['rest', 'create', '-o', 'json', '/org/acme/group', '-f', file('c.json', '{"name":"rest-created"}')])).stdout).name, 'rest-created');
    await run(['rest', 'delete', '/org/acme/group/rest-made']);
    const missing = await run(['rest', 'get', '/org/acme/group/rest-made'], { code: 1 });
    assert.match(missing.stderr, /not_found/);
    assert.match((await run(['rest', 'get', '-o', 'json', '/org/acme/-config'], { code: 1 })).stderr, /Keel derives no runtime configuration/);
  });

  test('workloads: create, get, deployments, replicas, update, redeploy, stop/start, cron, clone, reports, exports, delete', async () => {
    const created = await json(['workload', 'create', '--name', 'api', '--image', 'nginx:1.27', '--port', '80', '--env', 'MODE=live']);
    assert.equal(created.spec.containers[0].image, 'nginx:1.27');
    const ready = await until(() => json(['workload', 'get', 'api']), (w) => w.status?.ready === true, 'workload ready');
    assert.match(ready.status.endpoint, /^https:\/\//);
    assert.match((await run(['workload', 'get'])).stdout, /api/);
    const deployments = await json(['workload', 'get-deployments', 'api']);
    assert.deepEqual(deployments.items.map((d: { name: string }) => d.name).sort(), ['aws-us-east-2', 'gcp-us-east1']);
    for (const d of deployments.items) assert.equal(d.status.remote, `${endpoint}/-remote/${d.name}`);
    const replicas = await json(['workload', 'replica', 'get', 'api', '--location', 'aws-us-east-2']);
    assert.equal(replicas.items.length, 1);
    assert.match(replicas.items[0], /^api-[0-9a-f]{10}-[0-9a-f]{5}$/);
    assert.equal((await json(['workload', 'get-replicas', 'api'])).items.length, 2, 'one replica in each location');
    const stopped = await json(['workload', 'replica', 'stop', 'api', '--location', 'aws-us-east-2', '--replica-name', replicas.items[0]]);
    assert.equal(stopped.items[0].status, 'Stopping');

    const updated = await json(['workload', 'update', 'api', '--set', 'spec.containers.nginx.env.MODE.value=test', '--set', 'spec.defaultOptions.autoscaling.maxScale=3']);
    assert.deepEqual(updated.spec.containers[0].env, [{ name: 'MODE', value: 'test' }]);
    assert.equal(updated.spec.defaultOptions.autoscaling.maxScale, 3);
    // The CLI names an env entry's field: `env.MODE=…` is refused by the CLI itself, before any request.
    const bare = await run(['workload', 'update', 'api', '--set', 'spec.containers.nginx.env.MODE=other'], { code: 1 });
    assert.match(bare.stderr, /Bad updateble path detected: spec\.containers\.<name>\.env\.<name>/);
    const imaged = await json(['workload', 'update', 'api', '--set', 'spec.containers.nginx.image=nginx:1.28']);
    assert.deepEqual(imaged.spec.containers.map((c: { name: string; image: string }) => [c.name, c.image]), [['nginx', 'nginx:1.28']]);
    assert.deepEqual(imaged.spec.containers[0].env, [{ name: 'MODE', value: 'test' }], 'the rest of the container is kept');
    assert.equal(imaged.version, updated.version + 1);
    assert.match((await json(['workload', 'force-redeployment', 'api'])).items?.[0]?.tags?.['cpln/deployTimestamp'] ?? JSON.stringify(await json(['workload', 'get', 'api'])), /\d{4}-/);
    await run(['workload', 'stop', 'api']);
    assert.equal((await json(['workload', 'get', 'api'])).spec.defaultOptions.suspend, true);
    assert.deepEqual((await until(() => json(['workload', 'replica', 'get', 'api']), (r) => r.items.length === 0, 'no replicas while suspended')).items, []);
    await run(['workload', 'start', 'api']);
    assert.equal((await json(['workload', 'get', 'api'])).spec.defaultOptions.suspend, false);

    assert.equal((await json(['workload', 'clone', 'api', '--name', 'api-copy'])).name, 'api-copy');
    assert.equal((await json(['workload', 'tag', 'api', '--tag', 'k=v'])).items[0].tags.k, 'v');
    assert.deepEqual(names(await json(['workload', 'query', '--gvc', 'web', '--prop', 'name~api'])), ['api', 'api-copy']);
    assert.match((await run(['workload', 'permissions'])).stdout, /exec/);
    assert.match((await run(['workload', 'access-report', 'api'])).stdout, /manage/);
    assert.ok((await json(['workload', 'eventlog', 'api'])).items.length >= 3);
    assert.match((await run(['workload', 'audit', 'api', '-o', 'json'])).stdout, /"api"/);
    const tf = (await run(['workload', 'get', 'api', '-o', 'tf'])).stdout;
    assert.match(tf, /^resource "cpln_workload" "api" \{\n {2}gvc = "web"\n {2}name = "api"\n/);
    assert.match(tf, /\n {4}containers \{\n {6}name = "nginx"\n/);
    const crd = parseYaml((await run(['workload', 'get', 'api', '-o', 'crd'])).stdout);
    assert.deepEqual([crd.apiVersion, crd.kind, crd.gvc, crd.org, crd.spec.containers[0].image], ['cpln.io/v1', 'workload', 'web', 'acme', 'nginx:1.28']);
    await run(['workload', 'delete', 'api-copy']);

    // A cron workload: its runs are commands; `cron get` lists them and `cron run` waits for the outcome.
    const cron = file('cron.yaml', 'kind: workload\nname: nightly\nspec:\n  type: cron\n  job:\n    schedule: "0 3 * * *"\n  containers:\n    - name: main\n      image: busybox:1.36\n      cpu: 50m\n      memory: 128Mi\n');
    await run(['apply', '-f', cron, '--gvc', 'web']);
    const started = await json(['workload', 'cron', 'start', 'nightly', '--location', 'aws-us-east-2']);
    assert.equal(started.items.length, 1);
    const runs = await until(() => json(['workload', 'cron', 'get', 'nightly']), (l) => l.items.some((i: { status: string }) => i.status === 'successful'), 'cron run completed');
    assert.equal(runs.items[0].location, 'aws-us-east-2');
    const waited = await json(['workload', 'cron', 'run', '--location', 'aws-us-east-2', '--', 'echo', 'hi']);
    assert.equal(waited.status, 'completed');
    const background = await json(['workload', 'cron', 'run', '--background', '--', 'echo', 'hi']);
    assert.equal(background.status, 'started');
  });

  test('volume sets: create, update, volumes, expand, shrink, snapshots, delete', async () => {
    const created = await json(['volumeset', 'create', '--name', 'data', '--performance-class', 'general-purpose-ssd', '--initial-capacity', '10']);
    assert.equal(created.spec.initialCapacity, 10);
    assert.equal((await json(['volumeset', 'update', 'data', '--set', 'spec.initialCapacity=20'])).spec.initialCapacity, 20);
    const mount = file('db.yaml', 'kind: workload\nname: db\nspec:\n  type: stateful\n  containers:\n    - name: main\n      image: postgres:16\n      cpu: 100m\n      memory: 256Mi\n      ports:\n        - number: 5432\n          protocol: tcp\n      volumes:\n        - uri: cpln://volumeset/data\n          path: /var/lib/postgresql\n');
    await run(['apply', '-f', mount, '--gvc', 'web']);
    const volumes = await until(() => json(['volumeset', 'volume', 'get', 'data']), (l) => l.items.length >= 2, 'volumes created');
    assert.ok(volumes.items.every((v: { location: string }) => ['aws-us-east-2', 'gcp-us-east1'].includes(v.location)));
    const expanded = await json(['volumeset', 'expand', 'data', '--new-size', '30', '--location', 'aws-us-east-2']);
    assert.equal(expanded.items[0].newSize, '30GiB');
    const sizeIn = (v: { status?: { locations?: Array<{ name: string; volumes?: Array<{ currentSize: number }> }> } }, location: string) => v.status?.locations?.find((l) => l.name === location)?.volumes?.[0]?.currentSize;
    await until(() => json(['volumeset', 'get', 'data']), (v) => sizeIn(v, 'aws-us-east-2') === 30, 'volume expanded');
    await json(['volumeset', 'shrink', 'data', '--new-size', '25', '--location', 'aws-us-east-2']);
    await until(() => json(['volumeset', 'get', 'data']), (v) => sizeIn(v, 'aws-us-east-2') === 25, 'volume shrunk');
    await json(['volumeset', 'snapshot', 'create', 'data', '--snapshot-name', 'before', '--location', 'aws-us-east-2']);
    const snaps = await until(() => json(['volumeset', 'snapshot', 'get', 'data']), (l) => l.items.some((i: { name: string }) => i.name === 'before'), 'snapshot listed');
    assert.ok(snaps.items.length >= 1);
    await run(['volumeset', 'snapshot', 'restore', 'data', '--snapshot-name', 'before', '--location', 'aws-us-east-2', '--volume-index', '0']);
    await run(['volumeset', 'snapshot', 'delete', 'data', '--snapshot-name', 'before', '--location', 'aws-us-east-2']);
    await run(['volumeset', 'volume', 'delete', 'data', '--location', 'gcp-us-east1', '--volume-index', '0']);
    assert.equal((await json(['volumeset', 'tag', 'data', '--tag', 'k=v'])).items[0].tags.k, 'v');
    assert.deepEqual(names(await json(['volumeset', 'query', '--prop', 'name=data'])), ['data']);
    assert.match((await run(['volumeset', 'permissions'])).stdout, /manage/);
    assert.match((await run(['volumeset', 'access-report', 'data'])).stdout, /manage/);
    assert.ok((await json(['volumeset', 'eventlog', 'data'])).items.length >= 2);
    await run(['workload', 'delete', 'db']);
    await run(['volumeset', 'delete', 'data']);
  });

  test('what needs a container runtime, a browser or another tool ends at once with a clear message', async () => {
    await run(['workload', 'create', '--name', 'shell', '--image', 'nginx:1.27', '--port', '80']);
    await until(() => json(['workload', 'replica', 'get', 'shell', '--location', 'aws-us-east-2']), (r) => r.items.length === 1, 'replica up');
    const exec = await run(['workload', 'exec', 'shell', '--location', 'aws-us-east-2', '--', 'ls'], { code: 1 });
    assert.match(exec.stdout, /exec, connect and cp are not available: Keel simulates replicas and runs no containers/);
    const session = await run(['workload', 'connect', 'shell', '--location', 'aws-us-east-2'], { code: 1 });
    assert.match(session.stdout, /exec, connect and cp are not available/);
    const fetched = await run(['cp', 'shell:/etc/hosts', 'hosts', '--location', 'aws-us-east-2'], { code: [1, 100] });
    assert.match(fetched.stderr, /exec, connect and cp are not available/);
    const sent = await run(['cp', file('up.txt', 'x'), 'shell:/tmp/up.txt', '--location', 'aws-us-east-2'], { code: 1 });
    assert.match(sent.stdout, /exec, connect and cp are not available/);
    // The CLI would create a workload, wait for its replica and sleep a minute before its terminal is refused: it is refused at the first step.
    const ran = await run(['workload', 'run', '--location', 'aws-us-east-2', '--', 'ls'], { code: 1, timeoutMs: 20_000 });
    assert.match(ran.stdout + ran.stderr, /cpln workload run is not available: Keel simulates replicas and runs no containers/);
    assert.ok(ran.ms < 10_000, `it failed after ${ran.ms} ms`);
    assert.ok(!names(await json(['workload', 'get'])).some((n) => n.startsWith('run-')), 'no runner workload was left behind');
    // port-forward listens locally; the first connection asks Keel for a ticket and ends the command.
    let connected = false;
    const forward = await cpln.run(['port-forward', 'shell', '0:80', '--location', 'aws-us-east-2'], {
      timeoutMs: 45_000,
      onStdout: (out) => {
        const port = /Forwarding from 127\.0\.0\.1:(\d+)/.exec(out)?.[1];
        if (port && !connected) {
          connected = true;
          connect(Number(port), '127.0.0.1').on('error', () => undefined);
        }
      },
    });
    steps++;
    commands.add('port-forward');
    assert.equal(forward.timedOut, false, forward.stdout);
    assert.deepEqual(forward.foreign, []);
    assert.equal(forward.code, 1);
    assert.match(forward.stdout + forward.stderr, /port-forward is not available: Keel simulates replicas/);
  });

  test('local tools: docker login setup, compose and Kubernetes conversion, helm releases, shell completion, logs', async () => {
    const login = await run(['image', 'docker-login']);
    assert.match(login.stdout + login.stderr, new RegExp(`Docker will authenticate to "${endpoint.replace('http://', '')}"`));
    // The CLI runs in its home directory, where `stack manifest` finds compose.yaml.
    file('compose.yaml', 'services:\n  web:\n    image: nginx:1.27\n    ports:\n      - "8080:80"\n');
    const stack = parseAllDocuments((await run(['stack', 'manifest'])).stdout).map((d) => d.toJS());
    assert.ok(stack.some((d) => d.kind === 'workload' && d.spec.containers[0].image === 'nginx:1.27'), JSON.stringify(stack));
    const k8s = file('deploy.yaml', 'apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: hello\nspec:\n  selector:\n    matchLabels:\n      app: hello\n  template:\n    metadata:\n      labels:\n        app: hello\n    spec:\n      containers:\n        - name: hello\n          image: nginx:1.27\n');
    // `convert` reports usage to the CLI vendor's own host by itself (not Keel's doing; the guard refuses it).
    const converted = JSON.parse((await run(['convert', '-f', k8s, '-o', 'json'], { phonesHome: /^(LOOKUP|REFUSED) k8s-converter-logging\.controlplane\.site/ })).stdout);
    assert.equal(converted[0].kind, 'workload');
    assert.match((await run(['helm', 'list'])).stdout, /NAME\s*\|GVC/);
    await run(['misc', 'install-completion', '--batch', '--shell', 'bash']);
    assert.match(readFileSync(join(cpln.home, '.bashrc'), 'utf8'), /cpln/);
    await run(['misc', 'uninstall-completion']);
    // The logs API lives on Keel too (endpoints.logs): the rollouts of the workloads above are there.
    const logs = await until(() => run(['logs', '{gvc="web"}']), (r) => /Rollout of workload version \d+ to \S+ complete/.test(r.stdout), 'rollout log lines');
    assert.doesNotMatch(logs.stderr, /not_found/);
  });
});
