// HAProxy in front of Keel's ingress (KEEL_INGRESS_PROXY=haproxy): requests for a workload
// endpoint's Host with a ready replica go from HAProxy straight to the replicas, so workload
// traffic costs Keel's process nothing; every other request (the path form, domains, a deployment
// with no ready replica, whose request Keel holds until one wakes) goes on to Keel's own ingress
// on a Unix socket, which answers it as it would alone. Keel writes HAProxy's configuration from
// the runtime's table of ready replicas and reloads it when the table changes; it reads the
// traffic HAProxy forwarded from HAProxy's stats, for autoscaling. See docs/runtime.md, "HAProxy".
import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { CLIENT_HEADER } from './ingress.js';

/** A workload endpoint HAProxy serves itself: its Host name, and the ready replicas' addresses. */
export interface FrontRoute {
  /** The deployment the traffic is counted against. */
  key: string;
  /** The Host name (no port), `WORKLOAD-GVCALIAS.localhost`. */
  host: string;
  targets: string[];
  port: number;
  /** The clients the workload's external firewall admits (IPv4 CIDRs); undefined: every client. */
  firewall?: { allow: string[]; block: string[] };
  /** The workload, as the firewall's refusal names it. */
  workload: string;
}

export interface HaproxyOptions {
  /** The haproxy binary. */
  binary: string;
  /** Where its configuration, map, sockets and pid file live. */
  dir: string;
  host: string;
  /** 0: a free port. */
  port: number;
  maxConnections: number;
  /** The least time between two reloads: changes in between wait for the next. */
  reloadMinMs: number;
  headersTimeoutMs: number;
  /** The Unix socket Keel's own ingress listens on (its directory is made HAProxy's group's). */
  fallback: string;
  /** The endpoints HAProxy serves itself, asked whenever the table may have changed. */
  table: () => FrontRoute[];
  /** Requests HAProxy forwarded to a deployment since the last call, and the most in flight at once. */
  onTraffic: (key: string, arrived: number, peak: number) => void;
  onError: (err: unknown) => void;
}

/** How long changes to the table are gathered before one reload. */
const RELOAD_DELAY_MS = 20;
/** How long after HAProxy died it is started again. */
const RESTART_DELAY_MS = 500;
const HOST = /^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$/;
const IPV4 = /^\d{1,3}(\.\d{1,3}){3}$/;

export class HaproxyFront {
  port = 0;
  private process?: ChildProcess;
  private written = '';
  private timer?: NodeJS.Timeout;
  private reloadedAt = 0;
  /** Reloads sent to HAProxy since it started (the bench and tests read it). */
  reloads = 0;
  /** Backend name → deployment, and the requests counted so far, of the configuration loaded last. */
  private backends = new Map<string, { key: string; counted: number }>();
  private polling = false;
  private stopped = false;

  /** The user HAProxy's workers run as (Debian's package makes `haproxy`); undefined: none, they stay root. */
  private readonly account = accountOf('haproxy');

  constructor(private readonly options: HaproxyOptions) {}

  /** The Unix socket Keel's own ingress listens on, for HAProxy. */
  get fallback(): string {
    return this.options.fallback;
  }

  private get config(): string {
    return join(this.options.dir, 'haproxy.cfg');
  }
  private get stats(): string {
    return join(this.options.dir, 'stats.sock');
  }
  private get pidFile(): string {
    return join(this.options.dir, 'haproxy.pid');
  }

  async start(): Promise<void> {
    mkdirSync(this.options.dir, { recursive: true, mode: 0o700 });
    // HAProxy's workers, which parse every client's bytes, run as the package's own user where
    // there is one: its group alone may reach Keel's ingress socket, and no one else.
    const group = this.account?.gid ?? 0;
    chownSync(dirname(this.fallback), 0, group);
    chmodSync(dirname(this.fallback), group ? 0o710 : 0o700);
    chownSync(this.fallback, 0, group);
    chmodSync(this.fallback, group ? 0o660 : 0o600);
    await this.stopLeftover();
    this.port = this.options.port || (await freePort(this.options.host));
    await this.run();
  }

  /** Starts HAProxy on the current table and waits until it serves; one that dies is started again. */
  private async run(): Promise<void> {
    this.written = '';
    this.write();
    // A process group of its own: a stop signal to Keel's group leaves HAProxy to Keel's shutdown,
    // which stops it after the replicas (HAProxy dying first would be restarted mid-shutdown).
    const proc = spawn(this.options.binary, ['-W', '-db', '-f', this.config, '-p', this.pidFile], { detached: true, stdio: ['ignore', 'ignore', 'pipe'] });
    let said = '';
    proc.stderr!.on('data', (chunk: Buffer) => (said = (said + chunk.toString()).slice(-4000)));
    this.process = proc;
    const began = Date.now();
    let serving = false;
    proc.on('exit', (code, signal) => {
      if (this.stopped || !serving) return;
      this.options.onError(new Error(`haproxy exited (${signal ?? code}) and is started again: ${said.trim()}`));
      const again = setTimeout(() => void this.run().catch(this.options.onError), RESTART_DELAY_MS);
      again.unref();
    });
    while (!(await answers(this.options.host, this.port))) {
      if (proc.exitCode !== null || proc.signalCode !== null || Date.now() - began > 10_000) {
        proc.kill('SIGKILL');
        throw new Error(`haproxy (${this.options.binary}) did not start serving port ${this.port}: ${said.trim() || `exit code ${proc.exitCode}`}`);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    serving = true;
  }

  /** The table may have changed: a reload follows shortly if it has. */
  changed(): void {
    if (this.timer || this.stopped) return;
    // A flapping probe must not reload HAProxy at its own pace: each reload forks workers and leaves old ones draining.
    const wait = Math.max(RELOAD_DELAY_MS, this.reloadedAt + this.options.reloadMinMs - Date.now());
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (this.stopped) return;
      try {
        if (this.write() && this.process) {
          this.process.kill('SIGUSR2');
          this.reloadedAt = Date.now();
          this.reloads++;
        }
      } catch (err) {
        this.options.onError(err);
      }
    }, wait);
  }

  /** Reads what HAProxy forwarded since the last poll (and clears its peaks). */
  async poll(): Promise<void> {
    if (this.polling || this.stopped || this.backends.size === 0) return;
    this.polling = true;
    try {
      const csv = await ask(this.stats, 'show stat -1 2 -1;clear counters');
      const lines = csv.split('\n');
      const header = (lines[0] ?? '').replace(/^# /, '').split(',');
      const at = (name: string) => header.indexOf(name);
      const [name, total, max, current] = [at('pxname'), at('stot'), at('smax'), at('scur')];
      for (const line of lines.slice(1)) {
        const fields = line.split(',');
        const backend = this.backends.get(fields[name]);
        if (!backend) continue;
        const stot = Number(fields[total]) || 0;
        // A reloaded HAProxy counts from zero again.
        const arrived = stot >= backend.counted ? stot - backend.counted : stot;
        backend.counted = stot;
        // The most in flight since the last poll, or now (a reload starts its peak again).
        const peak = Math.max(Number(fields[max]) || 0, Number(fields[current]) || 0);
        if (arrived > 0 || peak > 0) this.options.onTraffic(backend.key, arrived, peak);
      }
    } catch {
      // Mid-reload the socket may be gone for a moment; the next poll reads it.
    } finally {
      this.polling = false;
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    const proc = this.process;
    if (!proc || proc.exitCode !== null) return;
    const exited = new Promise((r) => proc.once('exit', r));
    proc.kill('SIGTERM');
    const late = setTimeout(() => proc.kill('SIGKILL'), 5_000);
    await exited;
    clearTimeout(late);
    rmSync(this.pidFile, { force: true });
  }

  /** Writes the configuration and map for the table now; false when nothing changed. */
  private write(): boolean {
    const routes = this.options.table().filter((r) => HOST.test(r.host) && r.targets.every((t) => IPV4.test(t)) && Number.isInteger(r.port));
    routes.sort((a, b) => (a.host < b.host ? -1 : 1));
    const backends = new Map<string, { key: string; counted: number }>();
    const map: string[] = [];
    const sections: string[] = [];
    routes.forEach((r, i) => {
      const name = `d${i}`;
      backends.set(name, { key: r.key, counted: 0 });
      map.push(`${r.host} ${name}`);
      sections.push(
        [
          `backend ${name}`,
          '  balance roundrobin',
          ...refusals(r),
          ...FORWARDED,
          ...r.targets.map((t, j) => `  server r${j} ${t}:${r.port}`),
        ].join('\n'),
      );
    });
    const o = this.options;
    const config = [
      'global',
      '  nbthread 1',
      ...(this.account ? ['  user haproxy', '  group haproxy'] : []),
      `  maxconn ${o.maxConnections}`,
      `  stats socket ${this.stats} mode 600 level admin`,
      // A reload leaves the old process serving the connections it holds (a WebSocket, a long
      // download), for an hour or 50 reloads at most, after which those connections are cut.
      '  hard-stop-after 1h',
      '  mworker-max-reloads 50',
      'defaults',
      '  mode http',
      '  option http-keep-alive',
      '  http-reuse always',
      '  timeout connect 5s',
      // Bodies and WebSockets may stream for as long as the workload takes, as through Keel's own ingress.
      '  timeout client 1h',
      '  timeout server 1h',
      '  timeout tunnel 1h',
      `  timeout http-request ${Math.max(1, Math.round(o.headersTimeoutMs / 1000))}s`,
      '  timeout http-keep-alive 5s',
      '  retries 2',
      '  option redispatch 1',
      // A replica stopped mid-answer, or one that closed a kept-alive connection: the request goes to another.
      '  retry-on conn-failure empty-response',
      ...errorFiles(o.dir),
      'frontend ingress',
      `  bind ${o.host.includes(':') ? `[${o.host}]` : o.host}:${this.port}`,
      `  http-request del-header ${CLIENT_HEADER}`,
      // Only a GET or HEAD is sent again; a request that may change something never is.
      '  http-request disable-l7-retry unless METH_GET || METH_HEAD',
      `  use_backend %[req.hdr(host),field(1,:),lower,map_str(${join(o.dir, 'hosts.map')},keel)]`,
      'backend keel',
      // Keel's ingress learns the client's address from this header, which only HAProxy sets.
      `  http-request set-header ${CLIENT_HEADER} %[src]`,
      `  server keel ${o.fallback}`,
      ...sections,
      '',
    ].join('\n');
    const text = `${config}\0${map.join('\n')}`;
    if (text === this.written) return false;
    writeFileSync(join(o.dir, 'hosts.map'), `${map.join('\n')}\n`);
    writeFileSync(this.config, config);
    this.written = text;
    this.backends = backends;
    return true;
  }

  /** An HAProxy a killed Keel left serving this data directory's ingress is stopped. */
  private async stopLeftover(): Promise<void> {
    if (!existsSync(this.pidFile)) return;
    const pid = Number(readFileSync(this.pidFile, 'utf8').trim());
    let cmdline = '';
    try {
      cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    } catch {
      // Not running.
    }
    if (pid > 0 && cmdline.includes(this.config)) {
      process.kill(pid, 'SIGTERM');
      const began = Date.now();
      while (existsSync(`/proc/${pid}`) && Date.now() - began < 5_000) await new Promise((r) => setTimeout(r, 20));
      if (existsSync(`/proc/${pid}`)) process.kill(pid, 'SIGKILL');
    }
    rmSync(this.pidFile, { force: true });
  }
}

/**
 * The X-Forwarded-* headers Keel's ingress sets, replacing whatever the client sent under these
 * names (no proxy in front is trusted), WebSocket upgrades included: the replica learns the real peer.
 */
const FORWARDED = [
  '  http-request set-header X-Forwarded-For %[src]',
  '  http-request set-header X-Forwarded-Host %[req.hdr(host)]',
  '  http-request set-header X-Forwarded-Proto http',
];

/**
 * The firewall's refusal, as Keel's ingress answers it (firewall.ts): a 403 unless the client's
 * address is in the allowed CIDRs and not in the blocked ones.
 */
function refusals(r: FrontRoute): string[] {
  if (!r.firewall) return [];
  const { allow, block } = r.firewall;
  const answer = (message: string) => `  http-request return status 403 content-type application/json lf-string "${JSON.stringify({ status: 403, message }).replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/%/g, '%%')}"`;
  const open = 'open it with spec.firewallConfig.external.inboundAllowCIDR (KEEL_FIREWALL=open opens every endpoint)';
  const lines: string[] = [];
  if (block.length) lines.push(`  acl blocked src ${block.join(' ')}`, `${answer(`${r.workload}'s firewall blocks this client (spec.firewallConfig.external.inboundBlockedCIDR)`)} if blocked`);
  if (allow.length) lines.push(`  acl allowed src ${allow.join(' ')}`, `${answer(`${r.workload}'s firewall does not admit external traffic from this client: ${open}`)} if !allowed`);
  else lines.push(answer(`${r.workload}'s firewall does not admit external traffic from this client: ${open}`));
  return lines;
}

/**
 * HAProxy's own answers to requests it read (no replica answered, or not in time), as JSON error
 * objects like the rest of Keel's. A request it cannot parse at all gets its built-in 400 page.
 */
const ERRORS: Array<[number, string, string]> = [
  [502, 'Bad Gateway', 'the replica did not answer'],
  [503, 'Service Unavailable', 'no replica of the workload answered'],
  [504, 'Gateway Timeout', 'the replica did not answer in time'],
];

/** Writes HAProxy's error files (whole HTTP responses) and returns the lines naming them. */
function errorFiles(dir: string): string[] {
  return ERRORS.map(([status, reason, message]) => {
    const body = JSON.stringify({ status, message });
    const file = join(dir, `${status}.http`);
    writeFileSync(file, `HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n${body}`);
    return `  errorfile ${status} ${file}`;
  });
}

/** A system user's uid and its group's gid, from /etc/passwd; undefined when there is no such user. */
function accountOf(name: string): { uid: number; gid: number } | undefined {
  try {
    const line = readFileSync('/etc/passwd', 'utf8')
      .split('\n')
      .find((l) => l.startsWith(`${name}:`));
    const [, , uid, gid] = line?.split(':') ?? [];
    return line ? { uid: Number(uid), gid: Number(gid) } : undefined;
  } catch {
    return undefined;
  }
}

/** Sends one command line to HAProxy's stats socket and reads the answer. */
export function ask(socket: string, line: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const c = connect(socket);
    let out = '';
    c.setEncoding('utf8');
    c.setTimeout(2_000, () => c.destroy(new Error('haproxy stats socket timed out')));
    c.on('connect', () => c.end(`${line}\n`));
    c.on('data', (d: string) => (out += d));
    c.on('end', () => resolve(out));
    c.on('error', reject);
  });
}

function answers(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const c = connect({ host, port });
    c.on('connect', () => (c.destroy(), resolve(true)));
    c.on('error', () => resolve(false));
  });
}

function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, host, () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}
