// GET of one gvc with authentication on, against a raw node:http server, in the same run.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { BENCH_DIR, load, loadTable, startKeel, waitForOutput, type Section } from './harness.js';

export async function benchGet(): Promise<Section> {
  const raw = spawn(process.execPath, [join(BENCH_DIR, 'raw-server.js')], { stdio: ['ignore', 'pipe', 'inherit'] });
  const keel = await startKeel();
  try {
    const rawPort = Number(await waitForOutput(raw, /^(\d+)\n/));
    const created = await keel.call('POST', `/org/${keel.org}/gvc`, { name: 'bench' });
    if (created.status !== 201) throw new Error(`could not create the benchmark gvc: ${created.status}`);
    const baseline = await load('raw node:http hello', { url: `http://127.0.0.1:${rawPort}/` });
    const get = await load('Keel GET /org/bench/gvc/bench (SQLite, key auth)', { url: `${keel.base}/org/${keel.org}/gvc/bench`, headers: { authorization: `Bearer ${keel.token}` } });
    const ratio = get.requestsPerSecond / baseline.requestsPerSecond;
    return {
      title: 'GET throughput against raw node:http',
      lines: [...loadTable([baseline, get]), '', `Ratio Keel / raw node:http: **${ratio.toFixed(2)}** (goal ≥ 0.5).`],
      figures: { getRequestsPerSecond: get.requestsPerSecond, rawRequestsPerSecond: baseline.requestsPerSecond, getVsRawRatio: ratio },
    };
  } finally {
    raw.kill('SIGTERM');
    await keel.stop();
  }
}
