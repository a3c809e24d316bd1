// The logs API (Loki-compatible, as `cpln logs` calls it) over the lines Keel's simulated platform
// writes: selectors, line filters, direction, limits and times, labels, permissions, bad queries,
// retention, and the tail over a WebSocket.
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import WebSocket from 'ws';
import { capLogLines, pruneLogLines } from '../../src/server/logs-api.js';
import { stamp, tsOf, tsOfMs } from '../../src/logs/time.js';
import { lineBytes } from '../../src/store/logs-sql.js';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';
import { spawnKeel } from '../support/spawn-keel.js';
import { waitFor } from '../support/wait.js';

const STEP = 100;
const [L1, L2] = ['aws-us-west-2', 'gcp-us-east1'];
const LOGS = '/logs/org/acme/loki/api/v1';

export type Entry = { labels: Record<string, string>; ts: string; line: string };

/** Every line of a Loki answer, flattened, in the answer's order per stream. */
export function entries(body: any): Entry[] {
  assert.equal(body.status, 'success');
  assert.equal(body.data.resultType, 'streams');
  return body.data.result.flatMap((s: any) => s.values.map(([ts, line]: [string, string]) => ({ labels: s.stream, ts, line })));
}

/** The promise's value, or a failure naming `what` after `ms`. */
async function within<T>(what: string, promise: Promise<T>, ms = 20_000): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms)));
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

const q = (params: Record<string, string | number>) => new URLSearchParams(Object.entries(params).map(([k, v]): [string, string] => [k, String(v)])).toString();

forEachBackend('logs API', (backend) => {
  let k: TestKeel;
  let base: string;
  const range = (query: string, extra: Record<string, string | number> = {}, token?: string) =>
    k.call('GET', `${LOGS}/query_range?${q({ query, limit: 1000, ...extra })}`, undefined, token === undefined ? {} : { token });
  const lines = async (query: string, extra: Record<string, string | number> = {}) => {
    const res = await range(query, extra);
    assert.equal(res.status, 200, res.raw);
    return entries(res.body);
  };

  before(async () => {
    k = await startKeel(backend, 'acme', { reconcile: true, reconcileStepMs: STEP });
    await k.app.core.listen({ host: '127.0.0.1', port: 0 });
    base = `127.0.0.1:${(k.app.core.server.address() as AddressInfo).port}`;
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'prod', spec: { staticPlacement: { locationLinks: [`//location/${L1}`, `//location/${L2}`] } } })).status, 201);
    const web = { name: 'web', spec: { type: 'standard', containers: [{ name: 'nginx', image: 'nginx:1.25', ports: [{ protocol: 'http', number: 80 }] }, { name: 'sidecar', image: 'busybox:1' }] } };
    assert.equal((await k.call('POST', '/org/acme/gvc/prod/workload', web)).status, 201);
    const job = { name: 'job', spec: { type: 'cron', containers: [{ name: 'main', image: 'busybox:1' }], job: { schedule: '0 0 * * *' } } };
    assert.equal((await k.call('POST', '/org/acme/gvc/prod/workload', job)).status, 201);
    assert.equal((await k.call('POST', '/org/acme/gvc/prod/volumeset', { name: 'data', spec: { initialCapacity: 10, performanceClass: 'general-purpose-ssd' } })).status, 201);
    // What the tests below read: both rollouts of web done, job's started, the volumes created.
    await waitFor('the first lines', () => lines('{gvc="prod"}'), (es) =>
      es.filter((e) => /^Rollout of workload version 1 .* complete/.test(e.line) && e.labels.workload === 'web').length === 2 &&
      es.filter((e) => /^Rollout of workload version 1 .* started/.test(e.line) && e.labels.workload === 'job').length === 2 &&
      es.filter((e) => /unbound \(was creating\)/.test(e.line) && e.labels.volumeset === 'data').length === 2 &&
      es.some((e) => e.line.startsWith('Workload is ready')),
    );
  });
  after(() => k.close());

  test('/discovery names the logs endpoint: Keel itself', async () => {
    const res = await k.call('GET', '/discovery', undefined, { token: null, headers: { host: base } });
    assert.equal(res.body.endpoints.logs, `http://${base}`);
    assert.equal(res.body.endpoints.logs, res.body.endpoints.api);
  });

  test('rollouts per location, replicas starting and passing health checks, in Loki\'s stream shape', async () => {
    const all = await waitFor('both rollouts complete', () => lines('{gvc="prod", workload="web"}', { direction: 'forward' }), (es) => es.filter((e) => /complete/.test(e.line)).length === 2);
    for (const location of [L1, L2]) {
      const here = all.filter((e) => e.labels.location === location);
      assert.ok(here.some((e) => e.line === `Rollout of workload version 1 to ${location} started` && !e.labels.container), location);
      for (const container of ['nginx', 'sidecar']) {
        const own = here.filter((e) => e.labels.container === container);
        assert.deepEqual(
          own.map((e) => e.line),
          [`Creating container ${container} from image ${container === 'nginx' ? 'nginx:1.25' : 'busybox:1'}`, `Started container ${container}`, `Health check passed: container ${container} is ready`],
        );
        assert.match(own[0].labels.replica, /^web-[0-9a-f]{10}-[0-9a-f]{5}$/);
        assert.equal(new Set(own.map((e) => e.labels.replica)).size, 1);
      }
    }
    // Times are ns since the epoch, as strings; a forward answer is oldest first within each stream.
    for (const e of all) {
      assert.match(e.ts, /^\d{19}$/);
      assert.ok(Math.abs(Number(BigInt(e.ts) / 1_000_000n) - Date.now()) < 120_000);
    }
    const res = await range('{gvc="prod", workload="web"}', { direction: 'forward' });
    for (const stream of res.body.data.result) {
      const times = stream.values.map((v: [string, string]) => BigInt(v[0]));
      assert.deepEqual(times, [...times].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)));
    }
    await waitFor('the workload ready line', () => lines('{workload="web"} |= "Workload is ready"'), (es) => es.length === 1 && es[0].labels.gvc === 'prod' && !es[0].labels.location);
  });

  test('selectors (=, !=, =~, !~) and line filters (|=, !=, |~, !~) pick exactly the matching lines', async () => {
    // The reconcilers go on writing (the cron job's runs): every read is bounded to what the first one saw.
    const seen = await lines('{gvc="prod"}');
    const upTo = { end: (seen.reduce((max, e) => (BigInt(e.ts) > max ? BigInt(e.ts) : max), 0n) + 1n).toString() };
    const all = await lines('{gvc="prod"}', upTo);
    assert.ok(all.length >= 10);
    const same = (got: Entry[], want: Entry[]) => {
      const key = (e: Entry) => `${e.ts} ${e.line}`;
      assert.deepEqual(got.map(key).sort(), want.map(key).sort());
      assert.ok(want.length > 0 && want.length < all.length, 'the case narrows the set');
    };
    same(await lines(`{gvc="prod", location="${L1}"}`, upTo), all.filter((e) => e.labels.location === L1));
    same(await lines('{gvc="prod", container!="nginx"}', upTo), all.filter((e) => e.labels.container !== 'nginx'));
    same(await lines('{gvc="prod", container=~"side.*|ngi"}', upTo), all.filter((e) => e.labels.container === 'sidecar'));
    same(await lines(`{gvc="prod", location!~"gcp-.*"}`, upTo), all.filter((e) => !e.labels.location?.startsWith('gcp-')));
    same(await lines('{gvc="prod"} |= "Health check"', upTo), all.filter((e) => e.line.includes('Health check')));
    same(await lines('{gvc="prod"} != "container"', upTo), all.filter((e) => !e.line.includes('container')));
    same(await lines('{gvc="prod"} |~ "(?i)ROLLOUT.*COMPLETE"', upTo), all.filter((e) => /rollout.*complete/i.test(e.line)));
    same(await lines('{gvc="prod"} !~ "^(Started|Creating)" |= "nginx"', upTo), all.filter((e) => !/^(Started|Creating)/.test(e.line) && e.line.includes('nginx')));
    // A label no line carries reads as empty.
    assert.deepEqual(await lines('{gvc="prod", team="a"}', upTo), []);
    same(await lines('{gvc="prod", team="", workload="web"}', upTo), all.filter((e) => e.labels.workload === 'web'));
    assert.deepEqual(await lines('{gvc="elsewhere"}', upTo), []);
  });

  test('direction, limit, start and end (ns, s and RFC 3339)', async () => {
    const forward = await lines('{gvc="prod", workload="web"}', { direction: 'forward' });
    const byTime = (es: Entry[]) => es.map((e) => e.ts).sort();
    const times = byTime(forward);
    const first2 = await lines('{gvc="prod", workload="web"}', { direction: 'forward', limit: 2 });
    assert.deepEqual(byTime(first2), times.slice(0, 2));
    const last2 = await lines('{gvc="prod", workload="web"}', { limit: 2 });
    assert.deepEqual(byTime(last2), times.slice(-2));
    // start inclusive, end exclusive.
    const [from, to] = [times[1], times[times.length - 2]];
    const between = await lines('{gvc="prod", workload="web"}', { start: BigInt(from).toString(), end: BigInt(to).toString() });
    assert.deepEqual(byTime(between), times.filter((t) => t >= from && t < to));
    const iso = new Date(Number(BigInt(to) / 1_000_000n) + 1).toISOString();
    const untilIso = await lines('{gvc="prod", workload="web"}', { start: new Date(Date.now() - 600_000).toISOString(), end: iso });
    assert.deepEqual(byTime(untilIso), times.filter((t) => BigInt(t) < BigInt(Date.parse(iso)) * 1_000_000n));
    const soon = Math.floor(Date.now() / 1000) + 60;
    const seconds = await lines('{gvc="prod", workload="web"}', { start: soon, end: soon + 60 });
    assert.deepEqual(seconds, []);
    // query (instant): the lines up to its time.
    const instant = await k.call('GET', `${LOGS}/query?${q({ query: '{gvc="prod", workload="web"}', limit: 1000, time: BigInt(to).toString() })}`);
    assert.equal(instant.status, 200, instant.raw);
    assert.deepEqual(byTime(entries(instant.body)), times.filter((t) => t < to));
  });

  test('labels and label values', async () => {
    const labels = await k.call('GET', `${LOGS}/labels`);
    assert.equal(labels.status, 200);
    assert.deepEqual(labels.body, { status: 'success', data: ['gvc', 'workload', 'location', 'container', 'replica', 'volumeset'] });
    const locations = await k.call('GET', `${LOGS}/label/location/values`);
    assert.deepEqual(locations.body, { status: 'success', data: [L1, L2] });
    const containers = await k.call('GET', `${LOGS}/label/container/values?${q({ query: '{workload="web"}' })}`);
    assert.deepEqual(containers.body.data, ['nginx', 'sidecar']);
    assert.deepEqual((await k.call('GET', `${LOGS}/label/team/values`)).body, { status: 'success', data: [] });
    // Before any line: nothing.
    const old = await k.call('GET', `${LOGS}/labels?${q({ start: '1000000000', end: '1000003600' })}`);
    assert.deepEqual(old.body.data, []);
  });

  test('cron runs, command stages and volume operations are logged', async () => {
    const run = await k.call('POST', '/org/acme/gvc/prod/workload/job/-command', { type: 'runCronWorkload', spec: { location: L1 } });
    assert.equal(run.status, 201, run.raw);
    const cron = await waitFor('the cron run', () => lines('{gvc="prod", workload="job"} |= "Cron job"', { direction: 'forward' }), (es) => es.length === 2);
    assert.match(cron[0].line, /^Cron job started in replica command-[0-9a-f-]{36}-[0-9a-f]{5}$/, 'a run started by a command is named after it');
    assert.equal(cron[0].labels.replica, cron[0].line.split(' ').pop());
    assert.match(cron[1].line, /completed$/);
    const stages = await lines('{gvc="prod", workload="job"} |= "Command runCronWorkload"', { direction: 'forward' });
    assert.deepEqual(stages.map((e) => e.line.replace(/ [0-9a-f-]{36}/, ' ID')), ['Command runCronWorkload ID running', 'Command runCronWorkload ID completed']);

    await waitFor('volumes ready', () => lines(`{volumeset="data", location="${L1}"}`), (es) => es.some((e) => /unbound \(was creating\)/.test(e.line)));
    const expand = await k.call('POST', '/org/acme/gvc/prod/volumeset/data/-command', { type: 'expandVolume', spec: { location: `//location/${L1}`, volumeIndex: 0, newStorageCapacity: 20 } });
    assert.equal(expand.status, 201, expand.raw);
    const resized = await waitFor('the resize', () => lines(`{gvc="prod", volumeset="data"} |~ "resized|expandVolume"`, { direction: 'forward' }), (es) => es.some((e) => /completed$/.test(e.line)));
    assert.ok(resized.every((e) => e.labels.location === L1), JSON.stringify(resized));
    assert.ok(resized.some((e) => /^Volume 0 \(data-aws-us-west-2-0\): resized from 10 GiB to 20 GiB$/.test(e.line)), JSON.stringify(resized));
    assert.ok(resized.some((e) => /expandVolume .* running$/.test(e.line)));
    const failing = await k.call('POST', '/org/acme/gvc/prod/volumeset/data/-command', { type: 'shrinkVolume', spec: { location: L1, volumeIndex: 0, newStorageCapacity: 30 } });
    assert.equal(failing.status, 201);
    await waitFor('the failure', () => lines('{volumeset="data"} |= "failed:"'), (es) => es.length === 1 && /is not smaller than the current size 20$/.test(es[0].line));
  });

  test('reading needs readLogs on the org: 403 without it (query, labels, tail), 200 once granted', async () => {
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name: 'reader' })).status, 201);
    const key = (await k.call('POST', '/org/acme/serviceaccount/reader/-addKey', { description: 't' })).body.key as string;
    // view alone is not enough.
    assert.equal((await k.call('PATCH', '/org/acme/group/viewers', { '$append/memberLinks': ['//serviceaccount/reader'] })).status, 200);
    assert.equal((await k.call('GET', '/org/acme/gvc/prod', undefined, { token: key })).status, 200);
    const denied = await range('{gvc="prod"}', {}, key);
    assert.equal(denied.status, 403);
    assert.deepEqual(Object.keys(denied.body).sort(), ['code', 'details', 'id', 'message', 'status']);
    assert.equal(denied.body.code, 'forbidden');
    assert.equal((await k.call('GET', `${LOGS}/labels`, undefined, { token: key })).status, 403);
    assert.equal((await k.call('GET', `${LOGS}/label/gvc/values`, undefined, { token: key })).status, 403);
    assert.equal((await k.call('GET', `${LOGS}/query?${q({ query: '{gvc="prod"}' })}`, undefined, { token: key })).status, 403);
    assert.equal(await tailRefusal(key), 403);
    assert.equal((await range('{gvc="prod"}', {}, 'not-a-key')).status, 401);
    assert.equal(await tailRefusal('not-a-key'), 401);

    const policy = { name: 'log-readers', targetKind: 'org', target: 'all', bindings: [{ permissions: ['readLogs'], principalLinks: ['//serviceaccount/reader'] }] };
    assert.equal((await k.call('POST', '/org/acme/policy', policy)).status, 201);
    const granted = await range('{gvc="prod"}', {}, key);
    assert.equal(granted.status, 200);
    assert.ok(entries(granted.body).length > 0);
    // Another org's logs stay out of reach.
    assert.equal((await k.call('GET', `/logs/org/other/loki/api/v1/query_range?${q({ query: '{gvc="prod"}' })}`, undefined, { token: key })).status, 403);
  });

  test('bad queries and parameters: 400 with the error object, naming what is wrong', async () => {
    const cases: Array<[Record<string, string | number>, RegExp]> = [
      [{ query: '{gvc="prod"' }, /expected ','/],
      [{ query: '{}' }, /at least one = or =~ label matcher/],
      [{ query: '{gvc=~".*"}' }, /at least one = or =~ label matcher/],
      [{ query: '' }, /empty/],
      [{ query: 'sum(count_over_time({gvc="prod"}[1m]))' }, /metric queries are not supported/],
      [{ query: '{gvc="prod"} | json' }, /unsupported pipeline stage/],
      [{ query: '{gvc="prod"} |~ "(a)\\\\1"' }, /invalid regular expression.*RE2/],
      [{ query: '{gvc="prod"} |~ "(?=x)"' }, /invalid regular expression/],
      [{ query: '{gvc="pr\\qod"}' }, /invalid string/],
      [{ query: `{gvc="${'x'.repeat(5000)}"}` }, /longer than 4096/],
      [{ query: '{gvc="prod"}', limit: 5001 }, /max entries limit per query exceeded/],
      [{ query: '{gvc="prod"}', limit: -1 }, /limit must be/],
      [{ query: '{gvc="prod"}', direction: 'sideways' }, /direction must be forward or backward/],
      [{ query: '{gvc="prod"}', start: 'yesterday' }, /start must be/],
      [{ query: '{gvc="prod"}', start: '2020-01-01T00:00:00Z', end: '2020-03-01T00:00:00Z' }, /time range exceeds the limit/],
      [{ query: '{gvc="prod"}', start: '2020-01-02T00:00:00Z', end: '2020-01-01T00:00:00Z' }, /end timestamp must not be before/],
      [{ query: '{gvc="prod"}', since: 'forever' }, /since must be a duration/],
    ];
    for (const [params, message] of cases) {
      const res = await k.call('GET', `${LOGS}/query_range?${q(params)}`);
      assert.equal(res.status, 400, `${JSON.stringify(params).slice(0, 100)}: ${res.raw}`);
      assert.deepEqual(Object.keys(res.body).sort(), ['code', 'details', 'id', 'message', 'status']);
      assert.equal(res.body.code, 'bad_request');
      assert.match(res.body.message, message);
    }
    // A pattern that backtracks exponentially elsewhere runs in linear time here.
    const started = Date.now();
    assert.equal((await range(`{gvc="prod"} |~ "(a+)+$"`)).status, 200);
    assert.equal((await range(`{gvc=~"(p|r|o|d|x+)+y", workload="web"}`)).status, 200);
    assert.ok(Date.now() - started < 5_000);
    // tail refuses a bad query before upgrading.
    assert.equal(await tailRefusal(k.token, '{gvc="prod"'), 400);
    // tail is a WebSocket only.
    const plain = await k.call('GET', `${LOGS}/tail?${q({ query: '{gvc="prod"}' })}`);
    assert.equal(plain.status, 400);
    assert.match(plain.body.message, /WebSocket/);
  });

  test('retention: lines older than KEEL_LOGS_MAX_AGE_DAYS, or the org\'s shorter logsRetentionDays, are removed', async () => {
    const now = Date.now();
    const line = (daysAgo: number, text: string) => ({ org: 'acme', ts: tsOfMs(now - daysAgo * 86_400_000), labels: { gvc: 'old', workload: 'w' }, line: text });
    await k.store.transaction((tx) => tx.appendLogs([line(40, 'forty days ago'), line(10, 'ten days ago'), line(3, 'three days ago'), line(0.5, 'hours ago')]));
    // Two windows: one query may span 721h at most.
    const window = (fromDays: number, toDays: number) => lines('{gvc="old"}', { start: tsOfMs(now - fromDays * 86_400_000), end: tsOfMs(now - toDays * 86_400_000 + 1), direction: 'forward' });
    const kept = async () => [...(await window(50, 25)), ...(await window(25, 0))].map((e) => e.line);
    assert.deepEqual(await kept(), ['forty days ago', 'ten days ago', 'three days ago', 'hours ago']);
    assert.equal(await pruneLogLines(k.store, { logsMaxAgeDays: 30 }, now), 1);
    assert.deepEqual(await kept(), ['ten days ago', 'three days ago', 'hours ago']);
    // The org asks for less: its retention wins; it cannot ask for more than the server keeps.
    const org = (await k.call('GET', '/org/acme')).body;
    assert.equal((await k.call('PATCH', '/org/acme', { spec: { observability: { logsRetentionDays: 5 } } })).status, 200, org.name);
    assert.equal(await pruneLogLines(k.store, { logsMaxAgeDays: 30 }, now), 1);
    assert.deepEqual(await kept(), ['three days ago', 'hours ago']);
    assert.equal((await k.call('PATCH', '/org/acme', { spec: { observability: { logsRetentionDays: 100 } } })).status, 200);
    assert.equal(await pruneLogLines(k.store, { logsMaxAgeDays: 2 }, now), 1);
    assert.deepEqual(await kept(), ['hours ago']);
    // 0 keeps everything.
    assert.equal((await k.call('PATCH', '/org/acme', { spec: { observability: { '$drop': ['logsRetentionDays'] } } })).status, 200);
    assert.equal(await pruneLogLines(k.store, { logsMaxAgeDays: 0 }, now + 400 * 86_400_000), 0);
    // The simulated platform's own recent lines are still there.
    assert.ok((await lines('{gvc="prod"}')).length > 0);
  });

  test("the per-org cap: past KEEL_LOG_MAX_BYTES_PER_ORG an org's oldest lines go first; another org's stay", async () => {
    const usage = async (org: string) => (await k.store.logUsage()).find((u) => u.org === org)?.bytes ?? 0;
    const all = (org: string) => k.store.logs({ org, from: tsOf(0n), to: tsOfMs(Date.now() + 60_000), backward: false, labels: [], contains: [], limit: 10_000 });
    const line = (org: string, i: number) => ({ org, ts: stamp(Date.now()), labels: { gvc: 'capped', workload: 'w', replica: 'w-0' }, line: `${org} ${String(i).padStart(3, '0')} ${'x'.repeat(1000)}` });
    // Written in several transactions, as a replica's lines are, and the retention's removals counted too.
    for (let i = 0; i < 300; i += 50) await k.store.transaction((tx) => tx.appendLogs(Array.from({ length: 50 }, (_, j) => line('noisy', i + j))));
    await k.store.transaction((tx) => tx.appendLogs(Array.from({ length: 40 }, (_, j) => line('quiet', j))));
    const each = lineBytes(line('noisy', 0));
    assert.equal(await usage('noisy'), 300 * each);
    const quiet = await usage('quiet');
    assert.equal(quiet, 40 * each);
    const cap = 100 * each + 10;
    assert.equal(await capLogLines(k.store, { logMaxBytesPerOrg: cap }), 200);
    const kept = (await all('noisy')).map((l) => Number(l.line.split(' ')[1]));
    assert.deepEqual(kept, Array.from({ length: 100 }, (_, i) => 200 + i), 'the newest 100 lines are kept, the oldest gone');
    assert.equal(await usage('noisy'), 100 * each);
    assert.equal((await all('quiet')).length, 40);
    assert.equal(await usage('quiet'), quiet);
    assert.equal(await capLogLines(k.store, { logMaxBytesPerOrg: cap }), 0, 'nothing more once the org fits');
    // Folding the rows of changes keeps the figure.
    await k.store.foldLogUsage('noisy');
    assert.deepEqual((await k.store.logUsage()).find((u) => u.org === 'noisy'), { org: 'noisy', bytes: 100 * each, rows: 1 });
    // More lines: the cap holds, still oldest first.
    await k.store.transaction((tx) => tx.appendLogs(Array.from({ length: 10 }, (_, j) => line('noisy', 300 + j))));
    assert.equal(await capLogLines(k.store, { logMaxBytesPerOrg: cap }), 10);
    assert.deepEqual((await all('noisy')).map((l) => Number(l.line.split(' ')[1])), Array.from({ length: 100 }, (_, i) => 210 + i));
    // Retention's removals are counted too.
    assert.equal(await k.store.pruneLogs('noisy', tsOfMs(Date.now() + 1000), 50), 50);
    assert.equal(await usage('noisy'), 50 * each);
  });

  test('tail over a WebSocket: the bare key or Bearer; the newest lines, then each new matching line', async () => {
    for (const authorization of [k.token, `Bearer ${k.token}`]) {
      const start = (BigInt(Date.now() - 600_000) * 1_000_000n).toString();
      const tail = await openTail(authorization, { query: '{gvc="prod", workload="web"} |= "Rollout"', limit: 2, start });
      const history = await tail.next((es) => es.length >= 2);
      assert.equal(history.length, 2);
      assert.ok(history.every((e) => e.line.startsWith('Rollout') && e.labels.workload === 'web'));
      const image = `nginx:${Date.now()}`;
      const current = (await k.call('GET', '/org/acme/gvc/prod/workload/web')).body;
      assert.equal((await k.call('PATCH', '/org/acme/gvc/prod/workload/web', { spec: { '$patch/containers': [{ name: 'nginx', image }] } })).status, 200);
      const version = current.version + 1;
      const live = await tail.next((es) => es.filter((e) => e.line === `Rollout of workload version ${version} to ${L1} started` || e.line === `Rollout of workload version ${version} to ${L2} started`).length === 2);
      assert.ok(live.every((e) => e.line.includes('Rollout')), 'only matching lines');
      const seen = [...history, ...live].map((e) => `${e.ts} ${e.line}`);
      assert.equal(new Set(seen).size, seen.length, 'no line twice');
      tail.close();
    }
  });

  /** Writes `n` lines of about `size` characters to the store, as the platform would, one nanosecond apart. */
  const flood = (n: number, size: number, tag: string) =>
    k.store.transaction((tx) =>
      tx.appendLogs(Array.from({ length: n }, (_, i) => ({ org: 'acme', ts: stamp(Date.now()), labels: { gvc: 'flood', workload: 'noisy' }, line: `${tag} ${i} ${'x'.repeat(size)}` }))),
    );

  test('a tail that does not read is closed (1013) once more than 1 MiB waits for it, naming the time to resume after; resuming from it misses nothing', async () => {
    const start = tsOfMs(Date.now());
    const params = { query: '{gvc="flood"}', start, limit: 100 };
    const slow = await openTail(k.token, params);
    slow.pause();
    const fast = await openTail(k.token, params);
    // 8 MB in one go: more than the sockets' kernel buffers take, so more than 1 MiB waits in the server.
    await flood(4000, 2000, 'a');
    await fast.next((es) => es.some((e) => e.line.startsWith('a 3999 ')));
    // The next lines find the slow tail's buffer over the bound: it is closed instead of buffering them.
    await flood(10, 100, 'b');
    await fast.next((es) => es.some((e) => e.line.startsWith('b 9 ')));
    slow.resume();
    const { code, reason } = await within('the slow tail to close', slow.closed);
    const received = slow.take();
    assert.equal(code, 1013);
    const resume = /^slow consumer; resume after (\d+)$/.exec(reason);
    assert.ok(resume, reason);
    // What it was sent before the close, and nothing more was queued for it.
    assert.deepEqual(received.map((e) => e.line.split(' ', 2).join(' ')), Array.from({ length: 4000 }, (_, i) => `a ${i}`));
    assert.equal(resume[1], received[received.length - 1].ts, 'the resume point is the last line it was sent');
    // Resuming just after that time gives exactly the lines it missed.
    const again = await openTail(k.token, { ...params, start: (BigInt(resume[1]) + 1n).toString() });
    const missed = await again.next((es) => es.length >= 10);
    assert.deepEqual(missed.map((e) => e.line.split(' ', 2).join(' ')), Array.from({ length: 10 }, (_, i) => `b ${i}`));
    for (const tail of [fast, again]) tail.close();
  });

  test('a burst of more lines than one read of the feed takes (10,000) reaches a tail whole and in order', async () => {
    const tail = await openTail(k.token, { query: '{gvc="flood", workload="burst"}', start: tsOfMs(Date.now()), limit: 10 });
    const n = 12_000;
    await k.store.transaction((tx) =>
      tx.appendLogs(Array.from({ length: n }, (_, i) => ({ org: 'acme', ts: stamp(Date.now()), labels: { gvc: 'flood', workload: 'burst' }, line: `burst ${i}` }))),
    );
    const got = await tail.next((es) => es.some((e) => e.line === `burst ${n - 1}`));
    assert.deepEqual(got.map((e) => e.line), Array.from({ length: n }, (_, i) => `burst ${i}`));
    tail.close();
  });

  /** A service account that may read the org's logs, and a key of it. */
  const tailer = async (name: string) => {
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name })).status, 201);
    const policy = { name: `${name}-logs`, targetKind: 'org', target: 'all', bindings: [{ permissions: ['readLogs'], principalLinks: [`//serviceaccount/${name}`] }] };
    assert.equal((await k.call('POST', '/org/acme/policy', policy)).status, 201);
    const key = (await k.call('POST', `/org/acme/serviceaccount/${name}/-addKey`, { description: 't' })).body as { key: string; name: string };
    return { token: key.key, keyName: key.name };
  };

  test('a tail ends (1008) when its key is revoked or readLogs is taken away, and no line written after reaches it', async () => {
    const revocations: Array<[string, (name: string, keyName: string) => Promise<{ status: number }>]> = [
      ['key revoked', (name, keyName) => k.call('PATCH', `/org/acme/serviceaccount/${name}`, { '$drop/keys': [keyName] })],
      ['readLogs taken away', (name) => k.call('DELETE', `/org/acme/policy/${name}-logs`)],
      ['service account deleted', (name) => k.call('DELETE', `/org/acme/serviceaccount/${name}`)],
    ];
    for (const [i, [what, revoke]] of revocations.entries()) {
      const name = `tailer-${i}`;
      const { token, keyName } = await tailer(name);
      const tail = await openTail(token, { query: '{gvc="flood"}', start: tsOfMs(Date.now()), limit: 10 });
      await flood(1, 10, `before-${i}`);
      await tail.next((es) => es.some((e) => e.line.startsWith(`before-${i} `)));
      assert.ok((await revoke(name, keyName)).status < 300, what);
      await flood(1, 10, `after-${i}`);
      const { code, reason } = await within(`the tail to close (${what})`, tail.closed);
      assert.equal(code, 1008, what);
      assert.equal(reason, 'access to these logs was revoked');
      assert.deepEqual(tail.take(), [], `${what}: nothing after the revocation`);
    }
    // A bystander's tail goes on.
    const { token } = await tailer('bystander');
    const tail = await openTail(token, { query: '{gvc="flood"}', start: tsOfMs(Date.now()), limit: 10 });
    await flood(1, 10, 'bystander');
    await tail.next((es) => es.some((e) => e.line.startsWith('bystander ')));
    tail.close();
  });

  if (backend === 'postgres') {
    test('two Keel processes on one PostgreSQL: a tail on the second follows the rollout the first reconciles, and ends when the first revokes its key', async () => {
      const second = await spawnKeel(k.config.databaseUrl!);
      try {
        const host = second.base.replace(/^http:\/\//, '');
        const { token, keyName } = await tailer('remote-tailer');
        const tail = await openTail(token, { query: '{gvc="prod", workload="web"} |= "Rollout"', start: tsOfMs(Date.now()), limit: 1 }, host);
        const current = (await k.call('GET', '/org/acme/gvc/prod/workload/web')).body;
        assert.equal((await k.call('PATCH', '/org/acme/gvc/prod/workload/web', { spec: { '$patch/containers': [{ name: 'nginx', image: `nginx:remote-${Date.now()}` }] } })).status, 200);
        const version = current.version + 1;
        const wanted = [L1, L2].map((l) => `Rollout of workload version ${version} to ${l} complete`);
        const live = await tail.next((es) => wanted.every((w) => es.some((e) => e.line.startsWith(w))));
        assert.ok(live.every((e) => e.labels.workload === 'web' && e.line.includes('Rollout')), 'only matching lines');
        assert.equal((await k.call('PATCH', '/org/acme/serviceaccount/remote-tailer', { '$drop/keys': [keyName] })).status, 200);
        // The second process sees the revocation through the database, within about a second.
        const { code } = await within('the tail on the second process to close', tail.closed);
        assert.equal(code, 1008);
      } finally {
        await second.stop();
      }
    });
  }

  /**
   * Opens a tail (on this Keel, or on the one at `host`); next(ok) waits until the lines received
   * since the last next() satisfy ok, and returns them; closed resolves with the close code and reason.
   */
  async function openTail(authorization: string, params: Record<string, string | number>, host = base) {
    const ws = new WebSocket(`ws://${host}${LOGS}/tail?${q(params)}`, { headers: { authorization } });
    let got: Entry[] = [];
    let wake = () => {};
    const closed = new Promise<{ code: number; reason: string }>((resolve) => ws.once('close', (code, reason) => resolve({ code, reason: String(reason) })));
    ws.on('message', (data) => {
      const body = JSON.parse(String(data));
      for (const s of body.streams) for (const [ts, line] of s.values) got.push({ labels: s.stream, ts, line });
      wake();
    });
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    return {
      async next(ok: (es: Entry[]) => boolean, ms = 20_000): Promise<Entry[]> {
        const deadline = Date.now() + ms;
        while (!ok(got)) {
          if (Date.now() > deadline) throw new Error(`tail: timed out; got ${JSON.stringify(got).slice(0, 1500)}`);
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, 100);
            wake = () => {
              clearTimeout(timer);
              resolve();
            };
          });
        }
        const out = got;
        got = [];
        return out;
      },
      /** The lines received since the last next(), taken. */
      take(): Entry[] {
        const out = got;
        got = [];
        return out;
      },
      closed,
      /** Stops reading from the socket (a client that does not keep up), or starts again. */
      pause: () => (ws as unknown as { _socket: import('node:net').Socket })._socket.pause(),
      resume: () => (ws as unknown as { _socket: import('node:net').Socket })._socket.resume(),
      close: () => ws.close(),
    };
  }

  /** The HTTP status a tail upgrade is refused with. */
  function tailRefusal(authorization: string, query = '{gvc="prod"}'): Promise<number> {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(`ws://${base}${LOGS}/tail?${q({ query })}`, { headers: { authorization } });
      ws.once('unexpected-response', (_request, response) => {
        resolve(response.statusCode ?? 0);
        response.resume();
        ws.terminate();
      });
      ws.once('open', () => {
        ws.close();
        reject(new Error('the tail was opened'));
      });
      ws.once('error', () => {});
    });
  }
});
