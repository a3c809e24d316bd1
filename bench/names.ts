// Name resolution inside a replica (KEEL_RUNTIME=runc): from a replica's network namespace,
// sequential A queries for `WORKLOAD.GVC.cpln.local` to Keel's DNS server on the bridge's gateway
// (p50/p99, one UDP socket, the host's node, a query a millisecond after the last answer: under the
// per-source rate), and busybox nslookup run N times in one shell
// against the same loop running `true` (what starting a process costs alone). Needs root, runc, umoci and /bin/busybox.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../test/support/ports.js';
import { busyboxImage, leftovers, runtimeMissing } from '../test/support/runtime.js';
import { startKeel, type Section } from './harness.js';

const LOCATION = 'aws-us-east-2';
const SUBNET = '10.217.0.0/24';
const GATEWAY = '10.217.0.1';
const QUERIES = 2_000;
const LOOKUPS = 200;

const QUERY_SCRIPT = `
const dgram = require('node:dgram');
const name = process.argv[1], count = Number(process.argv[2]);
const labels = name.split('.');
const q = Buffer.concat([Buffer.from([0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0]), ...labels.map((l) => Buffer.concat([Buffer.from([l.length]), Buffer.from(l)])), Buffer.from([0, 0, 1, 0, 1])]);
const s = dgram.createSocket('udp4');
const times = []; let i = 0, started = 0;
s.on('message', (m) => { if ((m[3] & 15) !== 0 || m.readUInt16BE(6) < 1) { console.error('no answer'); process.exit(1); }
  clearTimeout(lost); times.push(Number(process.hrtime.bigint() - started) / 1e3); setTimeout(next, 1); });
let lost;
function next() { if (i++ === count) { console.log(JSON.stringify(times)); process.exit(0); } started = process.hrtime.bigint(); s.send(q, 53, '${GATEWAY}');
  lost = setTimeout(() => { console.error('no answer within 2 s'); process.exit(1); }, 2000); }
next();`;

const quantile = (values: number[], q: number) => [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(q * values.length))];

export async function benchNames(): Promise<Section> {
  const title = 'Names inside a replica (KEEL_RUNTIME=runc)';
  const missing = runtimeMissing();
  if (missing) return { title, lines: [`Not run: ${missing}.`], figures: {} };
  const work = mkdtempSync(join(tmpdir(), 'keel-bench-names-'));
  const image = busyboxImage(work, 'web', ['/bin/httpd', '-f', '-p', '8080', '-h', '/www'], { 'www/index.html': 'hello\n' });
  const dataDir = join(work, 'keel');
  mkdirSync(dataDir);
  const keel = await startKeel({ dataDir, env: { KEEL_RUNTIME: 'runc', KEEL_INGRESS_PORT: String(await freePort()), KEEL_RUNTIME_SUBNET: SUBNET, KEEL_RECONCILE_SPEED: '100', KEEL_LOG_LEVEL: 'warn' } });
  const org = keel.org;
  try {
    await keel.call('POST', `/org/${org}/gvc`, { name: 'bench', spec: { staticPlacement: { locationLinks: [`//location/${LOCATION}`] } } });
    await keel.call('POST', `/org/${org}/gvc/bench/workload`, {
      name: 'api',
      spec: { type: 'standard', containers: [{ name: 'web', image, ports: [{ number: 8080, protocol: 'http' }] }], defaultOptions: { autoscaling: { minScale: 1, maxScale: 1 } } },
    });
    for (const begun = Date.now(); ; ) {
      const d = await keel.call('GET', `/org/${org}/gvc/bench/workload/api/deployment/${LOCATION}`);
      if (d.body?.status?.ready === true) break;
      if (Date.now() - begun > 120_000) throw new Error('the api workload never became ready');
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    const [netns] = leftovers(dataDir).netns;
    const inside = (...args: string[]) => execFileSync('ip', ['netns', 'exec', netns, ...args], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
    const times = JSON.parse(inside(process.execPath, '-e', QUERY_SCRIPT, 'api.bench.cpln.local', String(QUERIES))) as number[];
    const loop = (body: string) => {
      const begun = process.hrtime.bigint();
      inside('/bin/busybox', 'sh', '-c', `i=0; while [ $i -lt ${LOOKUPS} ]; do ${body} >/dev/null || exit 1; i=$((i+1)); done`);
      return Number(process.hrtime.bigint() - begun) / 1e6;
    };
    const baseline = loop('/bin/busybox true');
    const lookups = loop(`/bin/busybox nslookup api.bench.cpln.local ${GATEWAY}`);
    const perLookupMs = lookups / LOOKUPS;
    const perTrueMs = baseline / LOOKUPS;
    const p50 = quantile(times, 0.5);
    const p99 = quantile(times, 0.99);
    return {
      title,
      lines: [
        `One replica of \`api\`; queries from the replica's own network namespace to Keel's DNS server on the bridge's gateway.`,
        '',
        '| measure | value |',
        '|---|---|',
        `| A query for \`api.bench.cpln.local\`, sequential, ${QUERIES} queries: p50 | ${p50.toFixed(0)} µs |`,
        `| same: p99 | ${p99.toFixed(0)} µs |`,
        `| busybox nslookup (A and AAAA), ${LOOKUPS} in one shell: per lookup, process start included | ${perLookupMs.toFixed(2)} ms |`,
        `| the same loop running \`true\` instead: per iteration | ${perTrueMs.toFixed(2)} ms |`,
        '',
        'The difference between the two loops is what a lookup adds to a process that makes one; process starts dominate both and are noisy on a shared machine (an earlier run of the same code measured no difference): the query p50 is the server\'s own figure.',
      ],
      figures: { namesQueryP50Us: p50, namesQueryP99Us: p99, namesNslookupMs: perLookupMs, namesTrueMs: perTrueMs },
    };
  } finally {
    await keel.stop();
    rmSync(work, { recursive: true, force: true });
  }
}
