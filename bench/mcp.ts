// BENCH_ONLY=mcp: agents' costs. 20 sandboxes created at once (total time; goal < 5 s), and an MCP
// tool call over streamable HTTP against the REST call it wraps, in the same run (goal ≤ 1.5×): with
// the SDK's client, and as a plain JSON-RPC POST that shows the server's part apart from the client's;
// and both plain calls against raw node:http answering Keel's own bytes, which shows the transport's
// part (what a POST with MCP's headers and answer costs a client over a GET, with no server work).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { BENCH_DIR, cpuSeconds, PG_URL, startKeel, waitForOutput, type RunningKeel, type Section } from './harness.js';
import { withBenchSchema } from './pg-schema.js';

const SANDBOXES = 20;
const SANDBOX_ROUNDS = 3;
const CALLS = 400;
const CALL_ROUNDS = 6;

async function sandboxTimes(keel: RunningKeel): Promise<number[]> {
  const times: number[] = [];
  for (let round = 0; round < SANDBOX_ROUNDS; round++) {
    const started = performance.now();
    const made = await Promise.all(Array.from({ length: SANDBOXES }, () => keel.call('POST', '/-admin/sandboxes', { ttlSeconds: 600, seed: [{ kind: 'gvc', name: 'play' }] })));
    times.push(performance.now() - started);
    for (const res of made) if (res.status !== 201) throw new Error(`sandbox: ${res.status} ${JSON.stringify(res.body)}`);
    for (const res of made) await keel.call('DELETE', `/-admin/sandboxes/${res.body.org}`);
  }
  return times;
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/**
 * The ways of making the call: the REST GET; the tool through the SDK's client as it comes; through
 * the SDK's client with the `fetch` docs/agents.md gives, whose requests each have a signal of their
 * own (the transport's shared signal otherwise collects one abort listener per request in Node's
 * fetch until a full collection, and each request walks them); the tool as a plain JSON-RPC POST;
 * and the REST GET and the plain POST against raw node:http answering the bytes Keel answered (the
 * transport's floor).
 */
const PATHS = ['rest', 'sdk', 'sdkOwnSignal', 'rpc', 'floorGet', 'floorPost'] as const;
type Path = (typeof PATHS)[number];

interface Latency {
  /** Every call's latency, ms, by path. */
  all: Record<Path, number[]>;
  /** Per round and path: the p50 latency (ms) and the server's CPU per call (µs). */
  rounds: Array<Record<Path, { p50: number; cpuMicros: number }>>;
}

/** docs/agents.md's fetch for the SDK's transport: each request gets a signal of its own, following the transport's. */
const ownSignalFetch = (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
  const own = new AbortController();
  const abort = () => own.abort(init?.signal?.reason);
  init?.signal?.addEventListener('abort', abort, { once: true });
  return fetch(input, { ...init, signal: own.signal }).finally(() => init?.signal?.removeEventListener('abort', abort));
};

async function callLatency(keel: RunningKeel): Promise<Latency> {
  const path = `/org/${keel.org}/gvc/target`;
  const created = await keel.call('POST', `/org/${keel.org}/gvc`, { name: 'target' });
  if (created.status !== 201) throw new Error(`gvc: ${created.status}`);
  const client = new Client({ name: 'bench', version: '1' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${keel.base}/mcp`), { requestInit: { headers: { authorization: `Bearer ${keel.token}` } } }));
  const ownSignalClient = new Client({ name: 'bench', version: '1' });
  await ownSignalClient.connect(new StreamableHTTPClientTransport(new URL(`${keel.base}/mcp`), { requestInit: { headers: { authorization: `Bearer ${keel.token}` } }, fetch: ownSignalFetch }));
  const args = { kind: 'gvc', name: 'target' };
  // What the SDK's client sends for the same call (its headers, and its body with the same key
  // order): one stateless POST, its answer parsed and checked, and nothing else.
  const rpcHeaders = { authorization: `Bearer ${keel.token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': LATEST_PROTOCOL_VERSION };
  let rpcId = 0;
  const rpcBody = () => JSON.stringify({ method: 'tools/call', params: { name: 'get_resource', arguments: args }, jsonrpc: '2.0', id: rpcId++ });
  // A client reads the item it asked for: every path parses its answer.
  const get = async (base: string) => {
    const res = await fetch(base + path, { headers: { authorization: `Bearer ${keel.token}` } });
    const item = JSON.parse(await res.text()) as { name?: string };
    if (res.status !== 200 || item.name !== 'target') throw new Error(`GET: ${res.status}`);
  };
  const post = async (base: string) => {
    const res = await fetch(`${base}/mcp`, { method: 'POST', headers: rpcHeaders, body: rpcBody() });
    const answer = JSON.parse(await res.text()) as { result?: { isError?: boolean } };
    if (res.status !== 200 || !answer.result || answer.result.isError) throw new Error(`get_resource: ${res.status} ${JSON.stringify(answer)}`);
  };
  // Raw node:http answering Keel's own answers to these two calls, byte for byte.
  const bodies = mkdtempSync(join(tmpdir(), 'keel-bench-mcp-'));
  let floor: ChildProcess | undefined;
  let floorBase = '';
  const pidOf = (p: Path) => (p === 'floorGet' || p === 'floorPost' ? floor!.pid! : keel.pid);
  const calls: Record<Path, () => Promise<void>> = {
    rest: () => get(keel.base),
    floorGet: () => get(floorBase),
    floorPost: () => post(floorBase),
    async sdk() {
      const res = await client.callTool({ name: 'get_resource', arguments: args });
      if (res.isError) throw new Error(`get_resource: ${JSON.stringify(res.content)}`);
    },
    async sdkOwnSignal() {
      const res = await ownSignalClient.callTool({ name: 'get_resource', arguments: args });
      if (res.isError) throw new Error(`get_resource: ${JSON.stringify(res.content)}`);
    },
    rpc: () => post(keel.base),
  };
  const timed = async (p: Path, into: number[]) => {
    const t = performance.now();
    await calls[p]();
    into.push(performance.now() - t);
  };
  try {
    writeFileSync(join(bodies, 'get.json'), await (await fetch(keel.base + path, { headers: { authorization: `Bearer ${keel.token}` } })).text());
    writeFileSync(join(bodies, 'post.json'), await (await fetch(`${keel.base}/mcp`, { method: 'POST', headers: rpcHeaders, body: rpcBody() })).text());
    floor = spawn(process.execPath, [join(BENCH_DIR, 'raw-server.js')], { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, RAW_GET_BODY: join(bodies, 'get.json'), RAW_POST_BODY: join(bodies, 'post.json') } });
    floorBase = `http://127.0.0.1:${Number(await waitForOutput(floor, /^(\d+)\n/))}`;
    // Warm-up, then rounds whose order rotates, so a drift of the machine falls on every path.
    for (let i = 0; i < 50; i++) for (const p of PATHS) await timed(p, []);
    const all: Latency['all'] = { rest: [], sdk: [], sdkOwnSignal: [], rpc: [], floorGet: [], floorPost: [] };
    const rounds: Latency['rounds'] = [];
    for (let round = 0; round < CALL_ROUNDS; round++) {
      const order = [...PATHS.slice(round % PATHS.length), ...PATHS.slice(0, round % PATHS.length)];
      const measured = {} as Latency['rounds'][number];
      for (const p of order) {
        const times: number[] = [];
        const cpuBefore = cpuSeconds(pidOf(p));
        for (let i = 0; i < CALLS; i++) await timed(p, times);
        measured[p] = { p50: percentile(times, 50), cpuMicros: ((cpuSeconds(pidOf(p)) - cpuBefore) * 1e6) / CALLS };
        all[p].push(...times);
      }
      rounds.push(measured);
    }
    return { all, rounds };
  } finally {
    await client.close();
    await ownSignalClient.close();
    floor?.kill('SIGTERM');
    rmSync(bodies, { recursive: true, force: true });
  }
}

/** Mean and range of per-round values, as `mean (min–max)`. */
function spread(values: number[], digits = 2): string {
  const mean = values.reduce((a, b) => a + b, 0) / values.length;
  return `${mean.toFixed(digits)} (${Math.min(...values).toFixed(digits)}–${Math.max(...values).toFixed(digits)})`;
}

function mean(values: number[]): number {
  return values.reduce((a, b) => a + b, 0) / values.length;
}

export async function benchMcp(): Promise<Section> {
  const env = { KEEL_ALLOW_SANDBOXES: 'on', KEEL_RECONCILE: 'off' };
  const sqlite = await startKeel({ env });
  let sqliteBoxes: number[];
  let latency: Latency;
  try {
    sqliteBoxes = await sandboxTimes(sqlite);
    latency = await callLatency(sqlite);
  } finally {
    await sqlite.stop();
  }
  const pgBoxes = await withBenchSchema(PG_URL, async (url) => {
    const pg = await startKeel({ env, databaseUrl: await url() });
    try {
      return await sandboxTimes(pg);
    } finally {
      await pg.stop();
    }
  });
  const median = (v: number[]) => percentile(v, 50);
  const { all, rounds } = latency;
  const ratio = median(all.sdk) / median(all.rest);
  const plainRatio = median(all.rpc) / median(all.rest);
  const ownSignalRatio = median(all.sdkOwnSignal) / median(all.rest);
  const floorRatio = median(all.floorPost) / median(all.floorGet);
  const perRound = (f: (r: Latency['rounds'][number]) => number) => rounds.map(f);
  const cpu = (p: Path) => mean(perRound((r) => r[p].cpuMicros));
  return {
    title: 'Agents: sandboxes and MCP tool calls',
    lines: [
      `${SANDBOXES} sandboxes (each seeded with a GVC) created by ${SANDBOXES} parallel POST /-admin/sandboxes on a built \`keel serve\`; median and worst of ${SANDBOX_ROUNDS} rounds. Goal: < 5 s.`,
      '',
      '| Backend | median, ms | worst, ms |',
      '|---|---|---|',
      `| SQLite | ${median(sqliteBoxes).toFixed(0)} | ${Math.max(...sqliteBoxes).toFixed(0)} |`,
      `| PostgreSQL | ${median(pgBoxes).toFixed(0)} | ${Math.max(...pgBoxes).toFixed(0)} |`,
      '',
      `One caller, sequential calls on SQLite: the MCP tool \`get_resource\` over streamable HTTP against the GET it wraps, ${CALL_ROUNDS} rounds of ${CALLS} calls per path, the paths' order rotating from round to round; ${CALLS * CALL_ROUNDS} calls per path. The tool is called three ways: with the SDK's client as it comes (what agents use; one stateless POST per call, its answer checked by the SDK); with the SDK's client given the \`fetch\` option of docs/agents.md (each request its own abort signal: as it comes, the transport's one signal collects an abort listener per request in Node's fetch, which later requests walk); and as a plain JSON-RPC POST (\`fetch\` with the body and headers the SDK sends, the answer parsed), which leaves out the SDK client's own cost. The REST GET and the plain POST are also sent to raw node:http answering, byte for byte, what Keel answered them (the transport's floor: what a POST with MCP's headers and answer costs a client over a GET when the server does no work). Every path parses its answer. Server CPU: the \`keel serve\` process's user + system time over a path's calls (from /proc), per call. Goal: tool median (SDK client) ≤ 1.5× REST.`,
      '',
      '| Call | p50, ms | p99, ms | server CPU per call, µs |',
      '|---|---|---|---|',
      `| REST GET /org/bench/gvc/target | ${median(all.rest).toFixed(2)} | ${percentile(all.rest, 99).toFixed(2)} | ${cpu('rest').toFixed(0)} |`,
      `| MCP get_resource, SDK client | ${median(all.sdk).toFixed(2)} | ${percentile(all.sdk, 99).toFixed(2)} | ${cpu('sdk').toFixed(0)} |`,
      `| MCP get_resource, SDK client, a signal per request | ${median(all.sdkOwnSignal).toFixed(2)} | ${percentile(all.sdkOwnSignal, 99).toFixed(2)} | ${cpu('sdkOwnSignal').toFixed(0)} |`,
      `| MCP get_resource, plain JSON-RPC POST | ${median(all.rpc).toFixed(2)} | ${percentile(all.rpc, 99).toFixed(2)} | ${cpu('rpc').toFixed(0)} |`,
      `| raw node:http answering Keel's GET answer | ${median(all.floorGet).toFixed(2)} | ${percentile(all.floorGet, 99).toFixed(2)} | ${cpu('floorGet').toFixed(0)} |`,
      `| raw node:http answering Keel's tool answer (plain JSON-RPC POST) | ${median(all.floorPost).toFixed(2)} | ${percentile(all.floorPost, 99).toFixed(2)} | ${cpu('floorPost').toFixed(0)} |`,
      '',
      '| Ratio to REST | over all calls (p50) | per round: mean (min–max) |',
      '|---|---|---|',
      `| p50 latency, SDK client | ${ratio.toFixed(2)}× | ${spread(perRound((r) => r.sdk.p50 / r.rest.p50))} |`,
      `| p50 latency, SDK client, a signal per request | ${ownSignalRatio.toFixed(2)}× | ${spread(perRound((r) => r.sdkOwnSignal.p50 / r.rest.p50))} |`,
      `| p50 latency, plain JSON-RPC POST | ${plainRatio.toFixed(2)}× | ${spread(perRound((r) => r.rpc.p50 / r.rest.p50))} |`,
      `| p50 latency, the transport's floor: plain POST over GET, both to raw node:http | ${floorRatio.toFixed(2)}× | ${spread(perRound((r) => r.floorPost.p50 / r.floorGet.p50))} |`,
      `| server CPU per call, SDK client | | ${spread(perRound((r) => r.sdk.cpuMicros / r.rest.cpuMicros))} |`,
      `| server CPU per call, plain JSON-RPC POST | | ${spread(perRound((r) => r.rpc.cpuMicros / r.rest.cpuMicros))} |`,
      '',
      `Load average at the end of the calls: ${loadavg().map((l) => l.toFixed(2)).join(' / ')} (1/5/15 min).`,
    ],
    figures: {
      sandboxes20SqliteMs: median(sqliteBoxes),
      sandboxes20PostgresMs: median(pgBoxes),
      mcpToolP50Ms: median(all.sdk),
      restGetP50Ms: median(all.rest),
      mcpOverRestRatio: ratio,
      mcpOwnSignalP50Ms: median(all.sdkOwnSignal),
      mcpOwnSignalOverRestRatio: ownSignalRatio,
      mcpPlainRpcP50Ms: median(all.rpc),
      mcpPlainRpcOverRestRatio: plainRatio,
      mcpTransportFloorRatio: floorRatio,
      mcpServerCpuMicrosPerCall: cpu('rpc'),
      restServerCpuMicrosPerCall: cpu('rest'),
    },
  };
}
