// BENCH_ONLY=mcp: agents' costs. 20 sandboxes created at once (total time; goal < 5 s), and an MCP
// tool call over streamable HTTP against the REST call it wraps, in the same run (goal ≤ 1.5×).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { PG_URL, startKeel, type RunningKeel, type Section } from './harness.js';
import { withBenchSchema } from './pg-schema.js';

const SANDBOXES = 20;
const SANDBOX_ROUNDS = 3;
const CALLS = 300;
const CALL_ROUNDS = 4;

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

async function callLatency(keel: RunningKeel): Promise<{ rest: number[]; tool: number[] }> {
  const path = `/org/${keel.org}/gvc/target`;
  const created = await keel.call('POST', `/org/${keel.org}/gvc`, { name: 'target' });
  if (created.status !== 201) throw new Error(`gvc: ${created.status}`);
  const client = new Client({ name: 'bench', version: '1' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${keel.base}/mcp`), { requestInit: { headers: { authorization: `Bearer ${keel.token}` } } }));
  const rest: number[] = [];
  const tool: number[] = [];
  const restCall = async () => {
    const t = performance.now();
    const res = await fetch(keel.base + path, { headers: { authorization: `Bearer ${keel.token}` } });
    await res.text();
    rest.push(performance.now() - t);
    if (res.status !== 200) throw new Error(`GET: ${res.status}`);
  };
  const toolCall = async () => {
    const t = performance.now();
    const res = await client.callTool({ name: 'get_resource', arguments: { kind: 'gvc', name: 'target' } });
    tool.push(performance.now() - t);
    if (res.isError) throw new Error(`get_resource: ${JSON.stringify(res.content)}`);
  };
  // Warm-up, then alternating rounds so a drift of the machine falls on both.
  for (let i = 0; i < 50; i++) await Promise.all([restCall(), toolCall()]);
  rest.length = 0;
  tool.length = 0;
  for (let round = 0; round < CALL_ROUNDS; round++) {
    for (const run of round % 2 === 0 ? [restCall, toolCall] : [toolCall, restCall]) for (let i = 0; i < CALLS; i++) await run();
  }
  await client.close();
  return { rest, tool };
}

export async function benchMcp(): Promise<Section> {
  const env = { KEEL_ALLOW_SANDBOXES: 'on', KEEL_RECONCILE: 'off' };
  const sqlite = await startKeel({ env });
  let sqliteBoxes: number[];
  let latency: { rest: number[]; tool: number[] };
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
  const ratio = median(latency.tool) / median(latency.rest);
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
      `One caller, sequential calls on SQLite: the MCP tool \`get_resource\` over streamable HTTP (the SDK's client; one stateless POST per call) against the GET it wraps, ${CALLS * CALL_ROUNDS / 2} calls each in alternating rounds. Goal: tool median ≤ 1.5× REST.`,
      '',
      '| Call | p50, ms | p99, ms |',
      '|---|---|---|',
      `| REST GET /org/bench/gvc/target | ${median(latency.rest).toFixed(2)} | ${percentile(latency.rest, 99).toFixed(2)} |`,
      `| MCP get_resource | ${median(latency.tool).toFixed(2)} | ${percentile(latency.tool, 99).toFixed(2)} |`,
      `| ratio (p50) | ${ratio.toFixed(2)}× | |`,
    ],
    figures: {
      sandboxes20SqliteMs: median(sqliteBoxes),
      sandboxes20PostgresMs: median(pgBoxes),
      mcpToolP50Ms: median(latency.tool),
      restGetP50Ms: median(latency.rest),
      mcpOverRestRatio: ratio,
    },
  };
}
