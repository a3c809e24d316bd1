// The official `cpln logs` (and `cpln logs -f`) against Keel: it finds the logs endpoint through
// /discovery, prints the lines of a selector, and follows new ones over the tail WebSocket.
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';

const CPLN = join(process.cwd(), 'node_modules/.bin/cpln');
const CLI_TIMEOUT_MS = 60_000;

forEachBackend(
  'cpln logs',
  (backend) => {
    let k: TestKeel;
    let home: string;
    let env: NodeJS.ProcessEnv;
    const cpln = (...args: string[]) =>
      new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
        execFile(CPLN, args, { env, timeout: CLI_TIMEOUT_MS }, (err, stdout, stderr) => resolve({ code: err ? Number((err as { code?: unknown }).code ?? 1) || 1 : 0, stdout, stderr }));
      });

    before(async () => {
      k = await startKeel(backend, 'acme', { reconcile: true, reconcileStepMs: 100 });
      const endpoint = await k.listen();
      home = mkdtempSync(join(tmpdir(), 'keel-cpln-'));
      // Only this test's profile: no CPLN_* setting of the environment the tests run in.
      env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('CPLN_')));
      Object.assign(env, { CPLN_HOME: home, CPLN_SKIP_UPDATE_CHECK: '1' });
      const profile = await cpln('profile', 'update', 'keel', '--endpoint', endpoint, '--token', k.token, '--org', 'acme', '--default');
      assert.equal(profile.code, 0, profile.stderr);
      assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'demo', spec: { staticPlacement: { locationLinks: ['//location/aws-us-east-2'] } } })).status, 201);
      assert.equal((await k.call('POST', '/org/acme/gvc/demo/workload', { name: 'web', spec: { type: 'standard', containers: [{ name: 'nginx', image: 'nginx:1.25', ports: [{ protocol: 'http', number: 80 }] }] } })).status, 201);
    });
    after(async () => {
      await k.close();
      rmSync(home, { recursive: true, force: true });
    });

    test('cpln logs prints the lines of a selector, with their labels; a bad query exits non-zero with the error', async () => {
      const deadline = Date.now() + 30_000;
      let out = '';
      while (!out.includes('Rollout of workload version 1 to aws-us-east-2 complete')) {
        assert.ok(Date.now() < deadline, `no rollout line printed: ${out}`);
        const run = await cpln('logs', '{gvc="demo", workload="web"}');
        assert.equal(run.code, 0, run.stderr);
        out = run.stdout;
      }
      const lines = out.trim().split('\n');
      assert.match(lines[0], /^\d{4}-\d\d-\d\dT[\d:.]+Z \{gvc="demo", workload="web", location="aws-us-east-2"\} Rollout of workload version 1 to aws-us-east-2 started$/);
      assert.ok(lines.some((l) => /\{gvc="demo", workload="web", location="aws-us-east-2", container="nginx", replica="web-[0-9a-f]{10}-[0-9a-f]{5}"\} Health check passed: container nginx is ready$/.test(l)), out);
      const filtered = await cpln('logs', '{gvc="demo"} |= "Health check"', '-o', 'raw');
      assert.equal(filtered.stdout.trim(), 'Health check passed: container nginx is ready');
      const bad = await cpln('logs', '{gvc="demo"');
      assert.notEqual(bad.code, 0);
      assert.match(bad.stdout + bad.stderr, /parse error/);
    });

    test('cpln logs -f prints the recent lines, then follows a new one', async () => {
      const child = spawn(CPLN, ['logs', '-f', '{gvc="demo", workload="web"} |= "Rollout"', '--since', '10m'], { env });
      const killer = setTimeout(() => child.kill('SIGKILL'), CLI_TIMEOUT_MS);
      let out = '';
      child.stdout.on('data', (chunk) => (out += chunk));
      child.stderr.on('data', (chunk) => (out += chunk));
      const until = async (what: string, ok: () => boolean) => {
        const deadline = Date.now() + 40_000;
        while (!ok()) {
          assert.ok(Date.now() < deadline, `cpln logs -f: no ${what}: ${out}`);
          await new Promise((resolve) => setTimeout(resolve, 100));
        }
      };
      try {
        // The history shows the tail is open; then a change rolls out version 2, which it follows.
        await until('history', () => out.includes('Rollout of workload version 1 to aws-us-east-2 complete'));
        assert.equal((await k.call('PATCH', '/org/acme/gvc/demo/workload/web', { spec: { '$patch/containers': [{ name: 'nginx', image: 'nginx:1.27' }] } })).status, 200);
        await until('new line', () => out.includes('Rollout of workload version 2 to aws-us-east-2 complete'));
        assert.ok(out.split('\n').filter(Boolean).every((l) => l.includes('Rollout')), out);
        assert.equal(out.split('Rollout of workload version 1 to aws-us-east-2 started').length, 2, 'each line once');
      } finally {
        clearTimeout(killer);
        child.kill('SIGKILL');
      }
    });

    test('a replica name that cpln workload get-replicas prints selects that replica\'s lines in cpln logs', async () => {
      const db = { name: 'db', spec: { type: 'stateful', containers: [{ name: 'pg', image: 'postgres:16', ports: [{ protocol: 'tcp', number: 5432 }] }], defaultOptions: { autoscaling: { minScale: 2, maxScale: 2 } } } };
      assert.equal((await k.call('POST', '/org/acme/gvc/demo/workload', db)).status, 201);
      for (const workload of ['web', 'db']) {
        let replicas: string[] = [];
        const deadline = Date.now() + 40_000;
        let lines: string[] = [];
        // Once the rollout is complete, the replicas it names are listed and have their lines.
        while (!lines.some((l) => l.includes('Health check passed'))) {
          assert.ok(Date.now() < deadline, `${workload}: no lines for replicas ${replicas.join(', ')}: ${lines.join('\n')}`);
          const listed = await cpln('workload', 'get-replicas', workload, '--gvc', 'demo', '--location', 'aws-us-east-2', '-o', 'json');
          assert.equal(listed.code, 0, listed.stderr);
          replicas = JSON.parse(listed.stdout).items;
          if (replicas.length === 0) continue;
          const run = await cpln('logs', `{gvc="demo", workload="${workload}", replica="${replicas[replicas.length - 1]}"}`);
          assert.equal(run.code, 0, run.stderr);
          lines = run.stdout.trim().split('\n').filter(Boolean);
        }
        if (workload === 'db') assert.deepEqual(replicas, ['db-0', 'db-1']);
        else assert.match(replicas[0], /^web-[0-9a-f]{10}-[0-9a-f]{5}$/);
        assert.ok(lines.every((l) => l.includes(`replica="${replicas[replicas.length - 1]}"`)), lines.join('\n'));
      }
    });
  },
  ['sqlite'],
);
