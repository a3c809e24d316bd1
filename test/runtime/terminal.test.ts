// The official CLI against a workload that really runs: `cpln workload open` opens its endpoint,
// `cpln workload connect` is a shell in the replica fed from stdin, a revoked or view-only key
// gets no terminal session, and one principal's open sessions are bounded while another's are not.
import assert from 'node:assert/strict';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { WebSocket } from 'ws';
import { busyboxImage, runtimeMissing } from '../support/runtime.js';
import { LOCATION, serveOne, serviceAccountWith, startRuntimeKeel, type RuntimeKeel } from '../support/runtime-keel.js';
import { waitFor } from '../support/wait.js';

const skip = runtimeMissing();

describe('terminal sessions and workload open through the CLI (KEEL_RUNTIME=runc)', { skip }, () => {
  let rt: RuntimeKeel;
  let work: string;
  let replica: string;
  const account = (name: string, permissions: string[]) => serviceAccountWith(rt, name, permissions);
  /** A terminal session opened as the CLI opens one; resolves once the command has printed `ready`. */
  const session = (token: string, command: string[], pod = replica) =>
    new Promise<{ said: () => string; closed: Promise<void>; close: () => void }>((resolve, reject) => {
      const ws = new WebSocket(`ws://127.0.0.1:${rt.port}/-remote/${LOCATION}/exec`);
      let said = '';
      const closed = new Promise<void>((done) => ws.on('close', () => done()));
      const handle = { said: () => said, closed, close: () => ws.close() };
      ws.on('open', () => ws.send(JSON.stringify({ token, org: 'acme', gvc: 'web', pod, command })));
      ws.on('message', (m) => {
        said += m.toString();
        if (said.includes('ready')) resolve(handle);
      });
      ws.on('error', reject);
      void closed.then(() => resolve(handle));
    });

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-runtime-terminal-'));
    const image = busyboxImage(work, 'web', ['/bin/sh', '-c', 'exec httpd -f -p 8080 -h /www'], { 'www/index.html': 'opened\n' });
    rt = await startRuntimeKeel({ cliReachesIngress: true });
    replica = await serveOne(rt, work, 'web', image);
  });
  after(async () => {
    await rt?.close();
    rmSync(work, { recursive: true, force: true });
  });

  test('cpln workload open opens the endpoint, and the page is there', async () => {
    // The CLI opens the URL with xdg-open, which hands it to $BROWSER: here a script that writes it down.
    const opened = join(work, 'opened.txt');
    const browser = join(work, 'browser.sh');
    writeFileSync(browser, `#!/bin/sh\necho "$1" >> ${opened}\n`);
    chmodSync(browser, 0o755);
    const r = await rt.cpln.run(['workload', 'open', 'web', '--gvc', 'web'], { env: { BROWSER: browser, DISPLAY: '' } });
    assert.equal(r.code, 0, r.stderr);
    const url = (await waitFor('the browser to be started', async () => (existsSync(opened) ? readFileSync(opened, 'utf8').trim() : ''), (u) => u !== '', 10_000)).split('\n').pop()!;
    const endpoint = new URL(url);
    assert.equal(endpoint.href, new URL((await rt.keel.call('GET', '/org/acme/gvc/web/workload/web')).body.status.endpoint).href);
    assert.equal(endpoint.port, String(rt.ingressPort));
    // The URL's host name ends in .localhost, which resolves to this machine: the page is served there.
    const page = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      httpRequest({ host: '127.0.0.1', port: Number(endpoint.port), path: endpoint.pathname, headers: { host: endpoint.host } }, (res) => {
        let body = '';
        res.on('data', (c) => (body += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      })
        .on('error', reject)
        .end();
    });
    assert.deepEqual(page, { status: 200, body: 'opened\n' });
  });

  test('cpln workload connect runs a shell in the replica, fed from stdin', async () => {
    const r = await rt.run(['workload', 'connect', 'web', '--location', LOCATION, '--shell', 'sh'], 0, 'echo "hi from $(hostname)"\ncd /www && cat index.html\nexit\n');
    assert.match(r.stdout, new RegExp(`hi from ${replica}`));
    assert.match(r.stdout, /opened/);
    // A shell that exits non-zero ends the CLI with its code.
    const failed = await rt.run(['workload', 'connect', 'web', '--location', LOCATION, '--shell', 'sh'], 4, 'exit 4\n');
    assert.match(failed.stdout, /command terminated with exit code 4/);
  });

  test('cpln workload connect gives the shell a pseudo-terminal', async () => {
    const r = await rt.run(['workload', 'connect', 'web', '--location', LOCATION, '--shell', 'sh'], 0, 'tty\nexit\n');
    assert.match(r.stdout, /^\/dev\/pts\/\d+\r?$/m);
    assert.doesNotMatch(r.stdout, /not a tty/);
    // exec without --tty stays on pipes (cp and scripts rely on bytes passing unchanged).
    const piped = await rt.cpln.run(['workload', 'exec', 'web', '--location', LOCATION, '--', '/bin/busybox', 'tty']);
    assert.notEqual(piped.code, 0);
    assert.match(piped.stdout, /not a tty/);
  });

  test('a revoked key and a view-only key get no terminal session', async () => {
    const temp = await account('temp', ['view', 'exec']);
    assert.equal((await rt.run(['workload', 'exec', 'web', '--profile', 'temp', '--location', LOCATION, '--', 'echo', 'allowed'])).stdout, 'allowed');
    await rt.run(['serviceaccount', 'remove-key', 'temp', '--key', temp.name]);
    const revoked = await rt.cpln.run(['workload', 'exec', 'web', '--profile', 'temp', '--location', LOCATION, '--', 'echo', 'pwned']);
    assert.notEqual(revoked.code, 0);
    assert.doesNotMatch(revoked.stdout, /pwned/);
    // The CLI's first call (the deployment, for its remote) is refused already.
    assert.match(revoked.stderr, /"status": 401/);
    assert.match(revoked.stderr, /the token is invalid, expired or revoked/);
    // Straight to the terminal stream, as a client holding the old key and the replica's name would go.
    const direct = await session(temp.key, ['echo', 'pwned']);
    await direct.closed;
    assert.match(direct.said(), /^Unauthorized: /);
    assert.doesNotMatch(direct.said(), /pwned/);

    await account('looker', ['view']);
    for (const args of [['connect', 'web', '--shell', 'sh'], ['exec', 'web', '--', 'echo', 'pwned']]) {
      const refused = await rt.cpln.run(['workload', args[0], args[1], '--profile', 'looker', '--location', LOCATION, ...args.slice(2)], { input: 'echo pwned\nexit\n' });
      assert.notEqual(refused.code, 0, `${args[0]}: ${refused.stdout}`);
      assert.match(refused.stdout, new RegExp(`^Unauthorized: .*${args[0]}`, 'm'));
      assert.doesNotMatch(refused.stdout, /^pwned/m);
    }
  });

  test('a key that may not exec in a workload cannot tell its running replicas from names that run nothing', async () => {
    // Exec on one other workload only, granted by link.
    assert.equal((await rt.keel.call('POST', '/org/acme/serviceaccount', { name: 'prober' })).status, 201);
    const prober = (await rt.keel.call('POST', '/org/acme/serviceaccount/prober/-addKey', { description: 'prober' })).body as { key: string };
    const grant = await rt.keel.call('POST', '/org/acme/policy', { name: 'prober', targetKind: 'workload', targetLinks: ['//gvc/web/workload/other'], bindings: [{ permissions: ['view', 'exec'], principalLinks: ['//serviceaccount/prober'] }] });
    assert.equal(grant.status, 201, JSON.stringify(grant.body));
    const answer = async (token: string, pod: string) => {
      const s = await session(token, ['echo', 'pwned'], pod);
      await s.closed;
      return s.said();
    };
    const running = await answer(prober.key, replica);
    const absent = await answer(prober.key, 'web-nothing-runs-here');
    assert.match(running, /^Unauthorized: /);
    assert.doesNotMatch(running, /pwned/);
    assert.equal(absent, running.replace(replica, 'web-nothing-runs-here'));
    // A key that may exec in every workload is told that the name runs nothing.
    const runner = await account('everywhere', ['view', 'exec']);
    assert.match(await answer(runner.key, 'web-nothing-runs-here'), /^Failed to create terminal session: no replica web-nothing-runs-here runs in location/);
  });

  test('connect needs the connect permission and exec the exec permission: neither grants the other', async () => {
    const connectIn = (profile: string) => rt.cpln.run(['workload', 'connect', 'web', '--profile', profile, '--location', LOCATION, '--shell', 'sh'], { input: 'echo "shell of uid $(id -u)"\nexit\n' });
    const execIn = (profile: string) => rt.cpln.run(['workload', 'exec', 'web', '--profile', profile, '--location', LOCATION, '--', 'echo', 'ran']);
    await account('runner', ['view', 'exec']);
    assert.equal((await execIn('runner')).stdout, 'ran');
    const noShell = await connectIn('runner');
    assert.notEqual(noShell.code, 0);
    assert.match(noShell.stdout, /^Unauthorized: .*connect/m);
    assert.doesNotMatch(noShell.stdout, /shell of/);

    await account('sheller', ['view', 'connect']);
    const shell = await connectIn('sheller');
    assert.equal(shell.code, 0, shell.stderr || shell.stdout);
    assert.match(shell.stdout, /shell of uid \d+/);
    const noExec = await execIn('sheller');
    assert.notEqual(noExec.code, 0);
    assert.match(noExec.stdout, /^Unauthorized: .*exec/m);
    assert.doesNotMatch(noExec.stdout, /^ran$/m);
  });

  test("the 21st open session of one principal is refused, another principal's is not", async () => {
    const open = [];
    for (let i = 0; i < 20; i++) {
      const s = await session(rt.keel.token, ['sh', '-c', 'echo ready; exec sleep 120']);
      assert.match(s.said(), /ready/, `session ${i + 1}: ${s.said()}`);
      open.push(s);
    }
    try {
      const refused = await rt.cpln.run(['workload', 'exec', 'web', '--location', LOCATION, '--', 'echo', 'one more']);
      assert.equal(refused.code, 1);
      assert.match(refused.stdout, /too many terminal sessions: this principal already has 20 open .*at most 20, KEEL_TERMINAL_SESSIONS_PER_PRINCIPAL/);
      assert.doesNotMatch(refused.stdout, /one more/);
      await account('other', ['view', 'exec']);
      assert.equal((await rt.run(['workload', 'exec', 'web', '--profile', 'other', '--location', LOCATION, '--', 'echo', 'still open'])).stdout, 'still open');
    } finally {
      for (const s of open) s.close();
      await Promise.all(open.map((s) => s.closed));
    }
    // Ended sessions no longer count.
    await waitFor('a session to be admitted again', async () => (await rt.cpln.run(['workload', 'exec', 'web', '--location', LOCATION, '--', 'echo', 'again'])).stdout, (out) => out === 'again', 15_000);
  });
});
