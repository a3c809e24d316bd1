// What the external firewall costs Keel's ingress: throughput of one Ingress applying a workload's
// firewallConfig (100 allowed CIDRs, the client's last; 50 blocked; 3 header filters, each passed)
// against one with the firewall open (KEEL_FIREWALL=open), in alternating rounds of one run, to
// the same keep-alive replica (a node server in a child process on the loopback). The kernel's
// rules (nftables between replicas) are not on this path: the ingress reaches replicas from the host.
import { spawn } from 'node:child_process';
import { Agent, request } from 'node:http';
import { Ingress, type Route } from '../src/runtime/ingress.js';
import type { Section } from './harness.js';

const ROUNDS = 6;
const ROUND_SECONDS = Number(process.env.BENCH_SECONDS ?? 8) / 2;
const CONNECTIONS = 16;

const SERVER = `require('http').createServer((req, res) => res.writeHead(200, { 'content-length': 6 }).end('hello\\n')).listen(0, '127.0.0.1', function () { console.log(this.address().port); });`;

const RULES = {
  external: {
    inboundAllowCIDR: [...Array.from({ length: 99 }, (_, i) => `10.${i}.0.0/16`), '127.0.0.0/8'],
    inboundBlockedCIDR: Array.from({ length: 50 }, (_, i) => `192.168.${i}.0/24`),
    http: {
      inboundHeaderFilter: [
        { key: 'x-team', allowedValues: ['blue-.*', 'green-.*'] },
        { key: 'user-agent', blockedValues: ['.*bot.*', 'curl/.*'] },
        { key: 'x-tenant', allowedValues: ['[a-z]+'], blockedValues: ['evil'] },
      ],
    },
  },
};
const HEADERS = { 'x-team': 'blue-7', 'user-agent': 'bench/1', 'x-tenant': 'acme' };

async function load(port: number): Promise<{ perSecond: number; failed: number }> {
  const agent = new Agent({ keepAlive: true, maxSockets: CONNECTIONS });
  const until = Date.now() + ROUND_SECONDS * 1000;
  let done = 0;
  let failed = 0;
  const one = () =>
    new Promise<void>((resolve) => {
      const req = request({ host: '127.0.0.1', port, path: '/', agent, headers: { host: 'web-gvc.localhost', ...HEADERS } }, (res) => {
        if (res.statusCode !== 200) failed++;
        res.on('end', resolve).resume();
      });
      req.on('error', () => (failed++, resolve()));
      req.end();
    });
  const begun = Date.now();
  await Promise.all(Array.from({ length: CONNECTIONS }, async () => {
    while (Date.now() < until) {
      await one();
      done++;
    }
  }));
  agent.destroy();
  return { perSecond: (done - failed) / ((Date.now() - begun) / 1000), failed };
}

export async function benchFirewall(): Promise<Section> {
  const title = "Firewall: the external rules' cost at Keel's ingress";
  const replica = spawn(process.execPath, ['-e', SERVER], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise<number>((resolve) => replica.stdout!.once('data', (d: Buffer) => resolve(Number(d.toString().trim()))));
  const route = (config: Record<string, unknown>): Route => (host, path) => (host === 'web-gvc' ? { key: 'web', targets: ['127.0.0.1'], port, path, holdMs: 0, firewall: { config, workload: 'web' } } : undefined);
  const enforced = new Ingress(route(RULES), undefined, { firewall: 'enforce' });
  const open = new Ingress(route({}), undefined, { firewall: 'open' });
  await enforced.listen({ host: '127.0.0.1', port: 0 });
  await open.listen({ host: '127.0.0.1', port: 0 });
  try {
    const ratios: number[] = [];
    const on: number[] = [];
    const off: number[] = [];
    await load(enforced.port!);
    await load(open.port!);
    for (let r = 0; r < ROUNDS; r++) {
      const [first, second] = r % 2 === 0 ? [enforced, open] : [open, enforced];
      const a = await load(first.port!);
      const b = await load(second.port!);
      if (a.failed || b.failed) throw new Error(`requests failed: ${a.failed + b.failed}`);
      const [withRules, without] = first === enforced ? [a, b] : [b, a];
      on.push(withRules.perSecond);
      off.push(without.perSecond);
      ratios.push(withRules.perSecond / without.perSecond);
    }
    const median = (v: number[]) => [...v].sort((x, y) => x - y)[Math.floor(v.length / 2)];
    const figures = { firewallOnToOffRatioMedian: median(ratios), firewallOnToOffRatioMin: Math.min(...ratios), firewallOnToOffRatioMax: Math.max(...ratios), firewallOnRequestsPerSecondMedian: median(on), firewallOffRequestsPerSecondMedian: median(off) };
    return {
      title,
      figures,
      lines: [
        `Keel's ingress with a workload's firewallConfig applied (100 allowed CIDRs, the client's last; 50 blocked; 3 header filters) against \`KEEL_FIREWALL=open\`, ${CONNECTIONS} keep-alive connections, ${ROUNDS} alternating rounds of ${ROUND_SECONDS} s to one replica on the loopback. The load comes from the bench's own process, which holds both ingresses too.`,
        '',
        '| Measure | Value | Target |',
        '|---|---|---|',
        `| throughput, rules on ÷ off: median (min–max) | ${figures.firewallOnToOffRatioMedian.toFixed(2)} (${figures.firewallOnToOffRatioMin.toFixed(2)}–${figures.firewallOnToOffRatioMax.toFixed(2)}) | ≥ 0.9 |`,
        `| requests/s, rules on / off (medians) | ${Math.round(figures.firewallOnRequestsPerSecondMedian)} / ${Math.round(figures.firewallOffRequestsPerSecondMedian)} | |`,
      ],
    };
  } finally {
    await enforced.close();
    await open.close();
    replica.kill();
  }
}
