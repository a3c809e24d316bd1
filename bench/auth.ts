// Authorization on the hot paths: (a) GET of one gvc by a service-account key that holds `view`
// only through a group-bound policy, against raw node:http in the same run; (b) a list where the
// caller may view 1% of 100k items (a targetQuery on a tag), which the view filter does in SQL.
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openStore } from '../src/store/open.js';
import { BENCH_DIR, CONNECTIONS, load, loadTable, startKeel, waitForOutput, type RunningKeel, type Section } from './harness.js';

const ITEMS = 100_000;
const VISIBLE_EVERY = 100; // 1%

async function ok(keel: RunningKeel, method: string, path: string, body?: unknown): Promise<any> {
  const res = await keel.call(method, path, body);
  if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body;
}

/** 100k `resource` items in one transaction from this process, straight into Keel's SQLite file. */
async function seed(dataDir: string, org: string): Promise<void> {
  const store = await openStore({ dataDir });
  const now = new Date().toISOString();
  try {
    await store.transaction(async (tx) => {
      for (let i = 0; i < ITEMS; i++) {
        const name = `item-${String(i).padStart(6, '0')}`;
        const tags = i % VISIBLE_EVERY === 0 ? { team: 'blue' } : { team: 'red' };
        await tx.insert({ org, kind: 'resource', gvc: '', name, id: randomUUID(), version: 1, created: now, lastModified: now, data: { name, description: name, tags, spec: {} } });
      }
    });
  } finally {
    await store.close();
  }
}

export async function benchAuth(): Promise<Section> {
  const dataDir = mkdtempSync(join(tmpdir(), 'keel-bench-auth-'));
  const raw = spawn(process.execPath, [join(BENCH_DIR, 'raw-server.js')], { stdio: ['ignore', 'pipe', 'inherit'] });
  const keel = await startKeel({ dataDir });
  try {
    const rawPort = Number(await waitForOutput(raw, /^(\d+)\n/));
    const org = keel.org;
    await ok(keel, 'POST', `/org/${org}/gvc`, { name: 'bench' });
    await ok(keel, 'POST', `/org/${org}/serviceaccount`, { name: 'reader' });
    const key = (await ok(keel, 'POST', `/org/${org}/serviceaccount/reader/-addKey`, { description: 'bench' })).key as string;
    await ok(keel, 'POST', `/org/${org}/group`, { name: 'readers', memberLinks: ['//serviceaccount/reader'] });
    await ok(keel, 'POST', `/org/${org}/policy`, { name: 'readers-gvc', targetKind: 'gvc', targetLinks: ['//gvc/bench'], bindings: [{ permissions: ['view'], principalLinks: ['//group/readers'] }] });
    await ok(keel, 'POST', `/org/${org}/policy`, {
      name: 'readers-blue',
      targetKind: 'resource',
      targetQuery: { spec: { match: 'all', terms: [{ op: '=', tag: 'team', value: 'blue' }] } },
      bindings: [{ permissions: ['view'], principalLinks: ['//group/readers'] }],
    });
    const started = Date.now();
    await seed(dataDir, org);
    const seedSeconds = (Date.now() - started) / 1000;
    const headers = { authorization: `Bearer ${key}` };
    const first = await fetch(`${keel.base}/org/${org}/resource`, { headers }).then((r) => r.json() as Promise<{ items: Array<{ tags: { team: string } }> }>);
    if (first.items.length !== 100 || first.items.some((i) => i.tags.team !== 'blue')) throw new Error('the filtered list is wrong');

    const baseline = await load('raw node:http hello', { url: `http://127.0.0.1:${rawPort}/` });
    const get = await load('GET one gvc, SA key, view through a group-bound policy', { url: `${keel.base}/org/${org}/gvc/bench`, headers });
    const list = await load(`GET /org/${org}/resource (first page of the 1% of ${ITEMS / 1000}k the caller may view)`, { url: `${keel.base}/org/${org}/resource`, headers });
    const single = await load('the same list, one client at a time', { url: `${keel.base}/org/${org}/resource`, headers, connections: 1 });
    const ratio = get.requestsPerSecond / baseline.requestsPerSecond;
    return {
      title: 'Authorization: group-bound GET and a 1%-visible list of 100k',
      lines: [
        ...loadTable([baseline, get, list, single]),
        '',
        `GET ratio Keel / raw node:http: **${ratio.toFixed(2)}** (goal ≥ 0.5).`,
        `Filtered list p50 **${list.p50} ms**, p99 **${list.p99} ms** under ${CONNECTIONS} connections, p99 **${single.p99} ms** one at a time (goal p99 ≤ 50 ms); ${ITEMS} items seeded in one transaction in ${seedSeconds.toFixed(1)} s (SQLite).`,
      ],
      figures: { authGetRequestsPerSecond: get.requestsPerSecond, rawRequestsPerSecond: baseline.requestsPerSecond, authGetVsRawRatio: ratio, filteredListP50: list.p50, filteredListP99: list.p99, filteredListSingleClientP99: single.p99 },
    };
  } finally {
    raw.kill('SIGTERM');
    await keel.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}
