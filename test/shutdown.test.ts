// Graceful shutdown of a real `keel serve` process: SIGTERM lets in-flight requests finish, ends
// watch streams, closes the store, exits 0; every acknowledged write is there after a restart.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';

const CLI = join(import.meta.dirname, '..', 'src', 'cli.ts');
const dataDir = mkdtempSync(join(tmpdir(), 'keel-shutdown-'));
after(() => rmSync(dataDir, { recursive: true, force: true }));

async function start(): Promise<{ child: ChildProcess; endpoint: string; exited: Promise<number | null> }> {
  const child = spawn(process.execPath, ['--import', 'tsx', CLI, 'serve'], {
    env: { ...process.env, KEEL_DATA_DIR: dataDir, KEEL_PORT: '0', KEEL_AUDIT_PORT: '0', KEEL_LOG_LEVEL: 'info', KEEL_DATABASE_URL: '', KEEL_RECONCILE: 'off' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const endpoint = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const m = /"endpoint":"(http:\/\/[^"]+)".*"msg":"keel is serving"/.exec(out);
      if (m) resolve(m[1]);
    });
    void exited.then((code) => reject(new Error(`keel exited with ${code} before serving: ${out}`)));
  });
  return { child, endpoint, exited };
}

test('SIGTERM finishes in-flight writes, ends watchers, exits 0; acknowledged writes survive a restart', async () => {
  const first = await start();
  const token = readFileSync(join(dataDir, 'admin.token'), 'utf8').trim();
  const headers = { authorization: `Bearer ${token}`, 'content-type': 'application/json' };
  const discovery = (await (await fetch(`${first.endpoint}/discovery`)).json()) as { endpoints: { audit: string } };
  const audit = await fetch(`${discovery.endpoints.audit}/about`);
  assert.equal(audit.status, 200, '/discovery names the Audit API where it really listens');
  const watch = await fetch(`${first.endpoint}/org/default/-watch`, { headers });
  assert.equal(watch.status, 200);
  const watchEnded = watch.body!.pipeTo(new WritableStream()).then(
    () => 'ended',
    () => 'ended',
  );
  let answered = 0;
  let signalled!: () => void;
  const signalSent = new Promise<void>((resolve) => (signalled = resolve));
  const writes = Array.from({ length: 40 }, async (_, i) => {
    try {
      const res = await fetch(`${first.endpoint}/org/default/group`, { method: 'POST', headers, body: JSON.stringify({ name: `sd-${i}` }) });
      await res.arrayBuffer();
      if (++answered === 5) {
        first.child.kill('SIGTERM');
        signalled();
      }
      return { name: `sd-${i}`, status: res.status };
    } catch {
      return { name: `sd-${i}`, status: 0 }; // refused or reset: never acknowledged
    }
  });
  const results = await Promise.all(writes);
  await signalSent;
  assert.equal(await first.exited, 0, 'a clean exit');
  assert.equal(await watchEnded, 'ended', 'the watch stream was ended, not left hanging');
  const acknowledged = results.filter((r) => r.status === 201).map((r) => r.name);
  assert.ok(acknowledged.length >= 5, `only ${acknowledged.length} acknowledged`);
  assert.ok(results.every((r) => r.status === 201 || r.status === 0 || r.status === 503), JSON.stringify(results));

  const second = await start();
  try {
    for (const name of acknowledged) {
      const res = await fetch(`${second.endpoint}/org/default/group/${name}`, { headers });
      assert.equal(res.status, 200, `${name} was acknowledged before the shutdown`);
    }
  } finally {
    second.child.kill('SIGTERM');
    assert.equal(await second.exited, 0);
  }
});
