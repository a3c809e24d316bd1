// The runc runtime: each replica a set of runc containers (one per container of the workload)
// sharing a network namespace on Keel's bridge, each on an overlay of its image's shared root
// filesystem. The reconciler declares which replicas a deployment wants (observe); this class
// starts and stops them on its own clock, restarts a replica whose container exited (with
// back-off), runs the probes that decide readiness, feeds containers' output into the logs and
// tells the reconciler when what it reports has changed, or the traffic its ingress measured has.
//
// State on disk, all under $KEEL_DATA_DIR/runtime: runc's own (`runc/`, its --root), the
// unpacked images (`unpacked/`, `layouts/`), one directory per replica (`replicas/ID/`, with the
// disk its containers write on, disk.ts) and the volume sets' data (`volumes/`, volumes.ts). A
// container's output goes through a FIFO to a worker thread (output.ts), never to a file. A Keel
// that starts finds whatever an earlier process left of replicas (after a kill -9) and removes it,
// volume sets' data aside: the reconciler then starts the replicas the stored state wants.
import type { Authorizer } from '../auth/authorizer.js';
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, closeSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, readSync, rmSync, statSync, watch, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { connect, type Socket } from 'node:net';
import { dirname, join } from 'node:path';
import type { BlobStore } from '../registry/blobs.js';
import { stamp } from '../logs/time.js';
import type { NewLogLine, Store } from '../store/types.js';
import { command, CommandError, quietly, underUsualUmask } from './command.js';
import { Images, ImageError, type Unpacked } from './images.js';
import { cgroupsNamed, removeCgroups } from './cgroups.js';
import { mountDisk, unmountDisk, VolumeDisks } from './disk.js';
import { DomainRoutes } from './domains.js';
import { KernelFirewall, frontRules, type FirewallMode } from './firewall.js';
import { ApiRelay } from './api-relay.js';
import { containerEnvs, EnvError, firstPort } from './env.js';
import { issueReplicaToken } from './replica-token.js';
import { HaproxyFront, type FrontRoute } from './haproxy.js';
import { DEFAULT_MAX_CONNECTIONS, HEADERS_TIMEOUT_MS, Ingress } from './ingress.js';
import { Lease } from './lease.js';
import { Names, resolvConf } from './names.js';
import { Network, parseSubnet } from './network.js';
import type { Peer } from './peers.js';
import { Output } from './output.js';
import { forwardTo, type Forward } from './port-forward.js';
import { plan, replaceAll, rolloutOf, within } from './rollouts.js';
import { bytes, ociSpec, type ContainerSpec } from './spec.js';
import { prepareVolumes, VolumeError, volumeSetDir, volumeSetsIn } from './volumes.js';
import type { Clock, Demand, DeploymentRef, ExecTarget, Observation, ReplicaState, ReplicaWant, Runtime, Wake } from './types.js';

export interface RuncOptions {
  dataDir: string;
  subnet: string;
  host: string;
  ingressPort: number;
  ingressMaxConnections?: number;
  /** The least time between two HAProxy reloads (default 2 s). */
  haproxyReloadMinMs?: number;
  /** What serves the ingress port: Keel's own ingress, or HAProxy in front of it (haproxy.ts). */
  ingressProxy?: 'keel' | 'haproxy';
  /** Whether workloads' firewallConfig is applied (firewall.ts); default enforce. */
  firewall?: FirewallMode;
  /** The longest grace period any replica gets when it stops (KEEL_MAX_TERMINATION_GRACE_SECONDS): a tenant's setting holds the host no longer. */
  maxGraceSeconds?: number;
  store: Store;
  /** Decides, as for any request, whether a workload's identity may reveal a secret it mounts. */
  auth: Authorizer;
  /** The store's PostgreSQL URL, if it is PostgreSQL (the lease on running replicas is taken there). */
  databaseUrl?: string;
  /** The registry's content, shared with the registry routes (images of an org's own registry are read from it). */
  blobs: BlobStore;
  onError: (err: unknown, what: string) => void;
  /** The host:port names of Keel's own registry (references to it resolve to its blobs). */
  registryHosts?: () => string[];
  /** The one org whose workloads may run `oci:` layouts of this host (the operator's, KEEL_ORG); undefined: any org's. */
  hostImagesOrg?: string;
  /** Bytes of output a replica may bring into the logs each second (KEEL_LOG_BYTES_PER_SECOND). */
  logBytesPerSecond: number;
  /** Bytes a replica may write into its root filesystem and scratch volumes (KEEL_REPLICA_DISK_BYTES). */
  replicaDiskBytes: number;
  /** The Core API's port (KEEL_PORT): replicas reach it at the gateway's address (api-relay.ts). 0: they do not. */
  apiPort?: number;
  /** Gives the Core API a connection a replica opened to the gateway (api-relay.ts); absent: replicas are not given the API. */
  acceptApi?: (socket: Socket) => void;
}

interface Probe {
  httpGet?: { path?: string; port?: number; scheme?: string; httpHeaders?: Array<{ name: string; value: string }> };
  tcpSocket?: { port?: number };
  exec?: { command?: string[] };
  initialDelaySeconds?: number;
  periodSeconds?: number;
  timeoutSeconds?: number;
  successThreshold?: number;
  failureThreshold?: number;
}

interface ProbeState {
  probe: Probe;
  nextAt: number;
  successes: number;
  failures: number;
  running: boolean;
  /** What the last run of the probe found wrong. */
  failure?: string;
}

interface Container {
  name: string;
  spec: ContainerSpec;
  runcId: string;
  bundle: string;
  /** The FIFO its stdout and stderr go to (read by output.ts). */
  output: string;
  child?: ChildProcess;
  startedAt: number;
  exited: boolean;
  ready: boolean;
  readiness?: ProbeState;
  liveness?: ProbeState;
}

interface Replica {
  id: string;
  ref: DeploymentRef;
  want: ReplicaWant;
  address?: string;
  containers: Container[];
  /** The volume sets' volumes it has mounted (released when it stops). */
  volumes: string[];
  restarts: number;
  exitCode?: number;
  message: string;
  /** A run's end (a cron run is never restarted). */
  finished?: { exitCode: number; at: number; message: string };
  /** Why it is not running now: waiting out a back-off, or its image failed. */
  waiting?: string;
  removed: boolean;
  /** The start or stop under way; the next one waits for it. */
  busy: Promise<void>;
  timer?: NodeJS.Timeout;
  lastExit: number;
  reported: string;
  /** Since when it has been ready, as observe last saw it (minReadySeconds counts from here). */
  readySince?: number;
}

const TICK_MS = 200;
const BACKOFF_FIRST_MS = 1_000;
const BACKOFF_MAX_MS = 300_000;
/** The longest wait of a replica refused a secret or a volume before it tries again. */
const GRANT_RETRY_MS = 5_000;
/** A replica that ran this long before exiting starts its back-off over. */
const BACKOFF_RESET_MS = 600_000;
const STOP_GRACE_MS = 5_000;
/** One write of replica log lines to the store: at most this many lines, about this many bytes (a bounded hold of the store's writer). */
const LOG_BATCH_LINES = 2_000;
const LOG_BATCH_BYTES = 512 * 1024;
/** Batches written per tick at most: with TICK_MS, at most 12.5 MiB/s of replicas' lines in all (the rest waits, then is dropped and counted). */
const LOG_BATCHES_PER_TICK = 5;
/** How fast a container's output is read, as a multiple of the log rate (at least 4 MiB/s): past it, its writes wait. */
const DRAIN_FACTOR = 16;

/**
 * A short name for one Keel data directory: the prefix of its network namespaces (`keel-SCOPE-…`),
 * cgroups (`/keel-SCOPE-…`) and bridge (`kbSCOPE`), so that Keels on one host keep apart.
 */
export function scopeOf(dataDir: string): string {
  return createHash('sha256').update(join(dataDir, 'runtime')).digest('hex').slice(0, 8);
}

const deploymentId = (d: Pick<DeploymentRef, 'org' | 'gvc' | 'workload' | 'location'>) => `${d.org}/${d.gvc}/${d.workload}/${d.location}`;
const workloadKey = (d: Pick<DeploymentRef, 'org' | 'gvc' | 'workload'>) => `workload|${d.org}/${d.gvc}/${d.workload}`;

export class RuncRuntime implements Runtime {
  readonly kind = 'runc' as const;
  readonly endsCommandRuns = true;
  private readonly dir: string;
  private readonly root: string;
  private readonly network: Network;
  private readonly names: Names;
  /** What names this data directory's namespaces, cgroups and bridge on the host (scopeOf). */
  private readonly scope: string;
  private readonly images: Images;
  private readonly blobs: BlobStore;
  readonly ingress: Ingress;
  private readonly front?: HaproxyFront;
  private readonly firewall: KernelFirewall;
  private readonly domains = new DomainRoutes();
  /** Replicas by deployment, then by name. */
  private readonly deployments = new Map<string, Map<string, Replica>>();
  /** Teardowns under way: replicas no deployment holds any more whose containers may still be stopping. */
  private readonly removing = new Set<Promise<void>>();
  /** The teardown under way of a replica by name, which a replica of the same name waits for. */
  private readonly leaving = new Map<string, Promise<void>>();
  private readonly listeners: Array<(d: DeploymentRef) => void> = [];
  /** Deployments that run nothing because their workload is suspended, by deployment: their endpoint says so. */
  private readonly suspended = new Map<string, DeploymentRef>();
  /** Deployments that wake on a request (observe's `wake`), by deployment. */
  private readonly waking = new Map<string, { ref: DeploymentRef; wake: Wake }>();
  /**
   * The deployments a request may name, by `host|HOST` (the endpoint's first label) and by
   * `workload|ORG/GVC/WORKLOAD` (the path form and domains' routes), then by id: kept as deployments
   * start, wake, suspend and go (reindex), so that a request looks up its own, never walks them all.
   */
  private readonly routes = new Map<string, Map<string, DeploymentRef>>();
  /** The keys of `routes` each deployment is under. */
  private readonly routeKeys = new Map<string, string[]>();
  /** Deployments whose traffic the reconciler asks about: the window and what it was last told. */
  private readonly demands = new Map<string, { ref: DeploymentRef; windowMs: number; reported: string }>();
  private tick?: NodeJS.Timeout;
  private readonly lease: Lease;
  private readonly output: Output;
  private readonly volumeDisks = new VolumeDisks();
  /** The write of log lines under way, if one is. */
  private writingLogs: Promise<void> | false = false;
  private stopped = false;
  private readonly relay: ApiRelay;
  /** Resolved when Keel stops: replicas still in their grace period get at most STOP_GRACE_MS more. */
  private hurry!: () => void;
  private readonly hurried = new Promise<void>((resolve) => (this.hurry = resolve));

  constructor(private readonly options: RuncOptions) {
    this.relay = new ApiRelay(options.host, options.apiPort ?? 0, options.acceptApi, (err) => options.onError(err, 'relaying replicas to the API'));
    this.dir = join(options.dataDir, 'runtime');
    this.root = join(this.dir, 'runc');
    this.scope = scopeOf(options.dataDir);
    this.network = new Network(parseSubnet(options.subnet), this.scope);
    this.names = new Names(this.network.gateway, () => this.peers(), options.firewall ?? 'enforce', (err) => options.onError(err, 'the replicas\' DNS server'));
    this.blobs = options.blobs;
    this.output = new Output({
      bytesPerSecond: options.logBytesPerSecond,
      drainBytesPerSecond: Math.max(4 * 1024 * 1024, DRAIN_FACTOR * options.logBytesPerSecond),
      onError: (err) => options.onError(err, 'reading replica output'),
    });
    this.images = new Images(this.dir, options.store, this.blobs, options.registryHosts ?? (() => []), options.hostImagesOrg);
    this.ingress = new Ingress(
      (host, path, hostname) => this.route(host, path, hostname),
      (id) => {
        const ref = this.waking.get(id)?.ref;
        if (ref) for (const listener of this.listeners) listener(ref);
      },
      { maxConnections: options.ingressMaxConnections, behindProxy: options.ingressProxy === 'haproxy', firewall: options.firewall },
    );
    this.firewall = new KernelFirewall({
      scope: this.scope,
      bridge: this.network.bridge,
      subnet: options.subnet,
      mode: options.firewall ?? 'enforce',
      dir: this.dir,
      onError: (err) => options.onError(err, 'the firewall (nftables)'),
    });
    if (options.ingressProxy === 'haproxy') {
      const dir = join(this.dir, 'haproxy');
      this.front = new HaproxyFront({
        binary: 'haproxy',
        dir,
        host: options.host,
        port: options.ingressPort,
        maxConnections: options.ingressMaxConnections ?? DEFAULT_MAX_CONNECTIONS,
        reloadMinMs: options.haproxyReloadMinMs ?? 2000,
        headersTimeoutMs: HEADERS_TIMEOUT_MS,
        // Outside the data directory, which HAProxy's workers (not root) may not enter.
        fallback: join(existsSync('/run') ? join('/run', `keel-${this.scope}`) : dir, 'ingress.sock'),
        table: () => this.frontTable(),
        onTraffic: (key, arrived, peak) => this.ingress.observed(key, arrived, peak),
        onError: (err) => options.onError(err, 'HAProxy in front of the ingress'),
      });
    }
    // The reconcilers' periodic scan finds every workload once this process holds the lease.
    this.lease = new Lease(
      options.databaseUrl,
      () => this.dropAll(),
      (err) => options.onError(err, 'the runtime lease'),
    );
  }

  owns(): boolean {
    return this.lease.held && !this.stopped;
  }

  /** The port workload traffic is served on. */
  get ingressPort(): number {
    return (this.front ? this.front.port : this.ingress.port) || this.options.ingressPort;
  }

  endpoint(host: string): string {
    return `http://${host}.localhost:${this.ingressPort}`;
  }

  domain(org: string, name: string, spec: Record<string, unknown> | undefined, created?: string): void {
    this.domains.set(org, name, spec, created);
  }

  held(): { deployments: DeploymentRef[]; domains: Array<{ org: string; name: string }>; volumeSets: Array<{ org: string; gvc: string; name: string }> } {
    return { deployments: [...this.deploymentRefs()].map(([, ref]) => ref), domains: this.domains.names(), volumeSets: volumeSetsIn(this.dir) };
  }

  locationsOf(org: string, gvc: string, workload: string): string[] {
    const locations: string[] = [];
    for (const [, ref] of this.deploymentRefs()) if (ref.org === org && ref.gvc === gvc && ref.workload === workload) locations.push(ref.location);
    return locations;
  }

  onChange(listener: (deployment: DeploymentRef) => void): void {
    this.listeners.push(listener);
  }

  async start(): Promise<void> {
    // Said at start rather than on the first workload: network namespaces, mounts and runc need root.
    if (process.getuid?.() !== 0) throw new Error('KEEL_RUNTIME=runc needs root (network namespaces, overlay mounts and runc); run Keel as root or use KEEL_RUNTIME=simulated');
    for (const [tool, flag] of [['runc', '--version'], ['umoci', '--version'], ['ip', '-V'], ['mkfs.ext4', '-V'], ['mkfifo', '--version'], ['nft', '--version'], ...(this.front ? [['haproxy', '-v']] : [])]) {
      await command(tool, [flag]).catch(() => {
        throw new Error(`KEEL_RUNTIME=runc needs ${tool} on the PATH (Debian: apt-get install runc umoci iproute2 e2fsprogs coreutils nftables${this.front ? ' haproxy' : ''})`);
      });
    }
    mkdirSync(join(this.dir, 'replicas'), { recursive: true });
    mkdirSync(this.root, { recursive: true });
    await this.removeLeftovers();
    // Rules a killed Keel left name addresses new replicas may take: none holds until rewritten.
    this.firewall.refresh([]);
    await this.firewall.settled();
    // No replica of this data directory runs now: the tokens an earlier process gave its replicas die.
    await this.options.store.deleteReplicaTokens(this.scope);
    if (this.front) {
      // Only HAProxy reaches Keel's ingress, on a socket in a directory only root and HAProxy's group may enter.
      const socket = this.front.fallback;
      mkdirSync(dirname(socket), { recursive: true, mode: 0o700 });
      rmSync(socket, { force: true });
      await this.ingress.listen({ path: socket });
      await this.front.start();
    } else await this.ingress.listen({ host: this.options.host, port: this.options.ingressPort });
    await this.lease.start();
    this.tick = setInterval(() => this.onTick(), TICK_MS);
    this.tick.unref();
  }

  /** Stops every replica this process runs (it no longer owns them, or it stops). */
  private dropAll(): Promise<unknown> {
    const all = [...this.deployments.values()].flatMap((d) => [...d.values()]);
    this.deployments.clear();
    this.suspended.clear();
    for (const id of new Set([...this.waking.keys(), ...this.demands.keys()])) this.forget(id);
    this.routes.clear();
    this.routeKeys.clear();
    for (const r of all) void this.remove(r);
    this.names.refresh();
    this.front?.changed();
    this.firewall.refresh(this.peers());
    return Promise.all(this.removing);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.hurry();
    clearInterval(this.tick);
    await this.dropAll();
    await this.output.closeAll().catch((err) => this.options.onError(err, 'reading replica output'));
    await this.writingLogs;
    await this.flushLogs(Infinity);
    await this.output.stop();
    await this.front?.stop();
    await this.ingress.close();
    await this.firewall.stop();
    await this.names.close();
    await this.relay.close();
    if (this.front) rmSync(dirname(this.front.fallback), { recursive: true, force: true });
    await this.network.down();
    await this.lease.stop();
  }

  observe(deployment: DeploymentRef, want: ReplicaWant[], _clock: Clock, wake?: Wake, suspended?: boolean): Observation {
    const id = deploymentId(deployment);
    if (suspended && want.length === 0 && !wake) this.suspended.set(id, deployment);
    else this.suspended.delete(id);
    if (wake) this.waking.set(id, { ref: deployment, wake });
    else if (want.length === 0) this.forget(id);
    else this.waking.delete(id);
    let replicas = this.deployments.get(id);
    if (!replicas) {
      if (want.length === 0) {
        this.reindex(id);
        return { replicas: [], ready: true };
      }
      this.deployments.set(id, (replicas = new Map()));
    }
    const now = Date.now();
    let touched = false;
    const running = [...replicas.values()].map((r) => {
      const ready = this.stateOf(r).ready;
      r.readySince = ready ? (r.readySince ?? now) : undefined;
      return { name: r.want.name, version: r.want.version, ready, readySince: r.readySince };
    });
    const rollout = rolloutOf(want[0]?.spec ?? {}, want.length);
    // A cron workload's runs and a deployment that goes away are not rolled: they change at once.
    const next = want.length === 0 || want.some((w) => w.run) ? replaceAll(running, want) : plan(running, want, rollout, now);
    for (const name of next.stop) {
      const replica = replicas.get(name)!;
      replicas.delete(name);
      touched = true;
      void this.remove(replica, Math.min(rolloutOf(replica.want.spec, 0).graceMs, (this.options.maxGraceSeconds ?? Infinity) * 1000));
    }
    for (const w of next.start) {
      // A stateful replica keeps its name across versions: the old one goes before the new one starts.
      const replica = this.create(deployment, w, this.leaving.get(w.name));
      replicas.set(w.name, replica);
      touched = true;
    }
    for (const r of replicas.values()) r.ref = deployment;
    if (replicas.size === 0) this.deployments.delete(id);
    this.reindex(id);
    this.names.refresh();
    this.front?.changed();
    if (touched) this.firewall.refresh(this.peers());
    const states = want.map((w) => {
      const r = replicas.get(w.name);
      return r && r.want.version === w.version ? this.stateOf(r) : { name: w.name, running: false, ready: false, restarts: 0, message: 'Pending: waiting for the rollout' };
    });
    const rolling = replicas.size > want.length || states.some((s) => !s.running && s.message.startsWith('Pending'));
    // A cron workload's runs come and go: they say nothing of whether the deployment is ready.
    const serving = states.filter((_, i) => !want[i].run);
    const notReady = serving.find((s) => !s.ready && s.message !== 'Running' && s.message !== 'ContainerCreating' && !s.message.startsWith('Pending'));
    const anyReady = [...replicas.values()].some((r) => !r.want.run && this.stateOf(r).ready);
    return {
      replicas: states,
      // A rollout is done once the older version's replicas are gone.
      ready: serving.every((s) => s.ready) && !rolling,
      // One that wakes on a request serves while its replicas start, unless they fail to.
      serving: wake && !notReady ? true : serving.length === 0 ? undefined : anyReady,
      message: notReady ? notReady.message : undefined,
      ...(next.after !== undefined ? { after: next.after } : {}),
    };
  }

  demand(deployment: DeploymentRef, windowMs: number): Demand {
    const id = deploymentId(deployment);
    const demand = this.ingress.demand(id, windowMs);
    this.demands.set(id, { ref: deployment, windowMs, reported: `${demand.concurrency}|${demand.rps}` });
    return demand;
  }

  /** A deployment neither runs nor wakes any more: its traffic is forgotten and its held requests answered. */
  private forget(id: string): void {
    this.waking.delete(id);
    this.reindex(id);
    this.demands.delete(id);
    this.ingress.forget(id);
    this.front?.changed();
  }

  /** The replicas of a deployment running now (with their addresses), for exec and the like. */
  replicasOf(deployment: Pick<DeploymentRef, 'org' | 'gvc' | 'workload' | 'location'>): Array<{ name: string; address?: string; containers: string[]; ready: boolean }> {
    return [...(this.deployments.get(deploymentId(deployment))?.values() ?? [])].map((r) => ({
      name: r.want.name,
      address: r.address,
      containers: r.containers.map((c) => c.name),
      ready: this.stateOf(r).ready,
    }));
  }

  private stateOf(r: Replica): ReplicaState {
    const running = r.containers.length > 0 && r.containers.every((c) => !c.exited);
    const ready = running && r.containers.every((c) => c.ready);
    const probe = running && !ready ? r.containers.find((c) => c.readiness?.failure !== undefined) : undefined;
    const message = r.waiting ?? (probe ? `Readiness probe of container ${probe.name} failed: ${probe.readiness!.failure}` : running ? 'Running' : r.message);
    return { name: r.want.name, running, ready, restarts: r.restarts, exitCode: r.exitCode, message: r.finished?.message ?? message, ...(r.finished ? { finished: r.finished } : {}) };
  }

  private create(ref: DeploymentRef, want: ReplicaWant, after?: Promise<void>): Replica {
    const id = createHash('sha256').update([this.dir, ref.org, ref.gvc, ref.workload, ref.location, want.name].join('\u0000')).digest('hex').slice(0, 16);
    const replica: Replica = { id, ref, want, containers: [], volumes: [], restarts: 0, message: 'ContainerCreating', removed: false, busy: Promise.resolve(), lastExit: 0, reported: '' };
    replica.reported = this.fingerprint(replica);
    replica.busy = (after ?? Promise.resolve()).then(() => this.run(replica));
    return replica;
  }

  /** Starts a replica's containers; a failure leaves it waiting with the reason, to try again after a back-off. */
  private async run(replica: Replica): Promise<void> {
    if (replica.removed || this.stopped) return;
    replica.waiting = undefined;
    replica.message = 'ContainerCreating';
    try {
      const specs = ((replica.want.spec.containers ?? []) as ContainerSpec[]).filter((c) => c && c.name);
      const images: Unpacked[] = [];
      for (const c of specs) images.push(await this.images.prepare(replica.ref.org, String(c.image ?? '')));
      if (replica.removed || this.stopped) return;
      const dir = join(this.dir, 'replicas', replica.id);
      mkdirSync(dir, { recursive: true });
      const disk = await mountDisk(dir, this.options.replicaDiskBytes);
      const envs = await containerEnvs({
        store: this.options.store,
        auth: this.options.auth,
        ref: replica.ref,
        replica: replica.want.name,
        version: replica.want.version,
        spec: replica.want.spec,
        globalEndpoint: this.endpoint(replica.ref.host),
        apiEndpoint: this.relay.endpoint(this.network.gateway),
        token: await issueReplicaToken(this.options.store, this.scope, replica.id, replica.ref, replica.want.spec),
      });
      const mounts = await prepareVolumes(this.options.store, this.options.auth, this.dir, dir, disk, { disks: this.volumeDisks, acquired: replica.volumes }, replica.ref, replica.want.name, replica.want.spec);
      if (replica.removed || this.stopped) return;
      replica.address ??= this.network.allocate();
      const netns = await this.network.attach(replica.id, replica.address);
      await this.names.listen();
      // Its queries are answered (by its org) from its first instant, before it is running or ready.
      this.names.refresh();
      // Nor is its first packet refused for want of rules naming its address (the forward chain
      // refuses what comes from an address it does not know): the table holds it before it runs.
      this.firewall.refresh(this.peers());
      await this.firewall.settled();
      if (replica.removed || this.stopped) return;
      const resolv = join(dir, 'resolv.conf');
      writeFileSync(resolv, resolvConf(this.network.gateway, replica.ref.gvc));
      const port = firstPort(specs);
      await this.relay.listen(this.network.gateway);
      for (const [i, c] of specs.entries()) {
        // Named by position, as runc's id: a container named `disk` or `volumes` must not meet the replica's own directories.
        const bundle = join(dir, `c${i}`);
        const rootfs = join(bundle, 'rootfs');
        const layer = join(disk, `c${i}`);
        mkdirSync(rootfs, { recursive: true });
        for (const d of ['upper', 'work']) mkdirSync(join(layer, d), { recursive: true });
        // The root filesystem's top takes the upper layer's mode: every user of the container enters it.
        chmodSync(join(layer, 'upper'), 0o755);
        await command('mount', ['-t', 'overlay', 'overlay', '-o', `lowerdir=${images[i].rootfs},upperdir=${join(layer, 'upper')},workdir=${join(layer, 'work')}`, rootfs]);
        const runcId = `${replica.id}-${i}`;
        const env = envs.get(c.name) ?? {};
        writeFileSync(join(bundle, 'config.json'), JSON.stringify(ociSpec({ container: c, image: images[i].config, rootfs, netns, hostname: replica.want.name, cgroup: `/keel-${this.scope}-${runcId}`, env, mounts: mounts.get(c.name), resolvConf: resolv })), { mode: 0o600 });
        const output = join(bundle, 'output.fifo');
        await command('mkfifo', ['-m', '0600', output]);
        const container: Container = { name: c.name, spec: c, runcId, bundle, output, startedAt: Date.now(), exited: false, ready: false };
        container.readiness = probeState((c as { readinessProbe?: Probe }).readinessProbe);
        container.liveness = probeState((c as { livenessProbe?: Probe }).livenessProbe);
        replica.containers.push(container);
        await this.launch(replica, container);
      }
    } catch (err) {
      const told = err instanceof ImageError || err instanceof VolumeError || err instanceof EnvError;
      const message = told ? err.message : `Failed to start replica ${replica.want.name}: ${(err as Error).message}`;
      if (!told) this.options.onError(err, `starting replica ${replica.want.name}`);
      this.log(replica, undefined, message);
      await this.teardown(replica, STOP_GRACE_MS);
      replica.message = message;
      if (replica.want.run) replica.finished = { exitCode: 1, at: Date.now(), message: `Failed: ${message}` };
      // A grant or a secret that appears later is picked up within GRANT_RETRY_MS, however many tries came before.
      else this.backOff(replica, message, err instanceof EnvError || err instanceof VolumeError ? GRANT_RETRY_MS : BACKOFF_MAX_MS);
    }
    this.changed(replica);
  }

  /** Runs one container in the foreground of a runc process of its own: its exit is the container's. */
  private async launch(replica: Replica, container: Container): Promise<void> {
    const { gvc, workload, location } = replica.ref;
    const labels = { gvc, workload, location, replica: replica.want.name };
    await this.output.open(container.runcId, container.output, replica.id, replica.ref.org, labels, { ...labels, container: container.name });
    // The reader has it open: opening it to write does not wait, and the writes block (not fail) while the pipe is full.
    const fd = openSync(container.output, 'w');
    const pidFile = join(container.bundle, 'pid');
    const child = spawn(...underUsualUmask('runc', ['--root', this.root, '--log', join(container.bundle, 'runc.log'), '--log-format', 'json', 'run', '--bundle', container.bundle, '--pid-file', pidFile, '--no-new-keyring', container.runcId]), { detached: true, stdio: ['ignore', fd, fd] });
    closeSync(fd);
    container.child = child;
    child.on('error', (err) => this.exited(replica, container, null, String(err.message)));
    child.on('exit', (code, signal) => this.exited(replica, container, code, signal ?? undefined));
    // A stop waits for the start (replica.busy): one that came while runc was still creating the
    // container would find nothing to signal yet, and runc would then create it after the teardown.
    // A stopping Keel waits STOP_GRACE_MS at most for a creation that hangs.
    await within(startedOrExited(child, pidFile), 2 ** 31 - 1, this.hurried, STOP_GRACE_MS);
  }

  private exited(replica: Replica, container: Container, code: number | null, signal?: string): void {
    if (container.exited) return;
    container.exited = true;
    container.ready = false;
    if (replica.removed || this.stopped || replica.containers.indexOf(container) < 0) return;
    const exitCode = code ?? 128;
    replica.exitCode = exitCode;
    replica.lastExit = Date.now();
    const memory = container.spec.memory ?? '128Mi';
    const why =
      exitCode === 137 && !signal
        ? `exit code 137: killed, most likely for exceeding its memory limit of ${memory} (${bytes(memory)} bytes; OOMKilled)`
        : signal
          ? `killed by ${signal}`
          : (runcFailure(container.bundle) ?? `exit code ${exitCode}`);
    replica.message = `Container ${container.name} of replica ${replica.want.name} exited (${why})`;
    this.log(replica, container, replica.message);
    const ran = Date.now() - container.startedAt;
    if (ran > BACKOFF_RESET_MS) replica.restarts = 0;
    if (replica.want.run) {
      // A run ends with its first container to exit; the others are stopped with it.
      replica.finished = { exitCode, at: replica.lastExit, message: exitCode === 0 ? 'Completed (exit code 0)' : `Failed: ${replica.message}` };
    }
    replica.busy = replica.busy.then(async () => {
      await this.teardown(replica, STOP_GRACE_MS);
      if (!replica.want.run) this.backOff(replica, replica.message);
      this.changed(replica);
    });
    this.changed(replica);
  }

  private backOff(replica: Replica, why: string, maxMs = BACKOFF_MAX_MS): void {
    if (replica.removed || this.stopped) return;
    const delay = Math.min(maxMs, BACKOFF_FIRST_MS * 2 ** Math.min(20, replica.restarts));
    replica.restarts++;
    replica.waiting = `Back-off restarting replica ${replica.want.name} in ${Math.round(delay / 1000)}s (restart ${replica.restarts}): ${why}`;
    clearTimeout(replica.timer);
    replica.timer = setTimeout(() => {
      replica.busy = replica.busy.then(() => this.run(replica));
    }, delay);
    replica.timer.unref();
  }

  /** Stops and forgets a replica. */
  private remove(replica: Replica, graceMs = STOP_GRACE_MS): Promise<void> {
    replica.removed = true;
    clearTimeout(replica.timer);
    const key = replica.want.name;
    const done = (replica.busy = replica.busy.then(() => this.teardown(replica, graceMs)).then(() => this.output.forget(replica.id)));
    // A replica started again under this name (a stateful one's next version) waits for this one to go.
    this.leaving.set(key, done);
    const settled = () => void (this.leaving.get(key) === done && this.leaving.delete(key));
    done.then(settled, settled);
    // Kept until done, so a shutdown right after a delete still waits for it.
    this.removing.add(done);
    const forget = () => void this.removing.delete(done);
    done.then(forget, forget);
    return done;
  }

  /** Stops a replica's containers and releases their mounts, cgroups, namespace and address. */
  private async teardown(replica: Replica, graceMs: number): Promise<void> {
    // Its CPLN_TOKEN dies first, before its processes do.
    await this.options.store.deleteReplicaTokens(this.scope, replica.id).catch((err) => this.options.onError(err, `revoking the token of replica ${replica.want.name}`));
    const containers = replica.containers;
    // The grace period covers preStop and SIGTERM together (as Kubernetes counts it); a stopping
    // Keel cuts it to STOP_GRACE_MS so that a clean stop never waits out 90 s per replica.
    const deadline = Date.now() + graceMs;
    const left = () => Math.max(0, deadline - Date.now());
    const inTime = <T>(p: Promise<T>) => within(p, left(), this.hurried, STOP_GRACE_MS);
    await Promise.all(
      containers.map((c) => {
        const preStop = c.spec.lifecycle?.preStop?.exec?.command;
        if (c.exited || !preStop?.length) return undefined;
        return inTime(quietly('runc', ['--root', this.root, 'exec', c.runcId, ...preStop]));
      }),
    );
    for (const c of containers) {
      if (!c.exited) await quietly('runc', ['--root', this.root, 'kill', c.runcId, 'TERM']);
    }
    await Promise.all(containers.map((c) => inTime(exitOf(c, left()))));
    for (const c of containers) {
      if (!c.exited) await quietly('runc', ['--root', this.root, 'kill', c.runcId, 'KILL']);
    }
    await Promise.all(containers.map((c) => exitOf(c, STOP_GRACE_MS)));
    replica.containers = [];
    for (const c of containers) {
      this.output.close(c.runcId);
      await quietly('runc', ['--root', this.root, 'delete', '--force', c.runcId]);
      await unmount(join(c.bundle, 'rootfs'));
    }
    await this.removeCgroups(`keel-${this.scope}-${replica.id}-`);
    const dir = join(this.dir, 'replicas', replica.id);
    if (existsSync(dir)) for (const c of readdirSync(dir)) await unmount(join(dir, c, 'rootfs'));
    await unmountDisk(dir);
    for (const volume of replica.volumes.splice(0)) await this.volumeDisks.release(volume);
    await this.network.detach(replica.id);
    if (replica.removed && replica.address) {
      this.network.release(replica.address);
      replica.address = undefined;
    }
    rmSync(join(this.dir, 'replicas', replica.id), { recursive: true, force: true });
  }

  /** What an earlier Keel process left (runc containers, mounts, namespaces, cgroups): removed. */
  private async removeLeftovers(): Promise<void> {
    const listed = await command('runc', ['--root', this.root, 'list', '--quiet']).catch(() => '');
    for (const id of listed.split('\n').filter(Boolean)) {
      await quietly('runc', ['--root', this.root, 'kill', id, 'KILL']);
      await quietly('runc', ['--root', this.root, 'delete', '--force', id]);
    }
    await this.volumeDisks.unmountUnder(join(this.dir, 'volumes'));
    const replicas = join(this.dir, 'replicas');
    for (const id of readdirSync(replicas)) {
      for (const c of readdirSync(join(replicas, id))) await unmount(join(replicas, id, c, 'rootfs'));
      await unmountDisk(join(replicas, id));
      await this.network.detach(id);
      rmSync(join(replicas, id), { recursive: true, force: true });
    }
    // No container of this data directory runs now: whatever cgroup of its scope is left, runc no longer knows.
    await this.removeCgroups(`keel-${this.scope}-`);
  }

  /** Removes the cgroups whose names start with `prefix`, those runc left or never knew of. */
  private async removeCgroups(prefix: string): Promise<void> {
    const left = await removeCgroups(cgroupsNamed(prefix));
    if (left.length > 0) this.options.onError(new Error(`still in use: ${left.join(', ')}`), 'removing the cgroups of stopped containers');
  }

  /** Probes due, readiness without a probe, new log output. */
  private onTick(): void {
    void this.front?.poll();
    const now = Date.now();
    for (const replicas of this.deployments.values()) {
      for (const replica of replicas.values()) {
        for (const c of replica.containers) {
          if (c.exited) continue;
          if (!c.readiness) {
            // No readiness probe: ready once runc has started the process.
            if (!c.ready && now - c.startedAt >= TICK_MS && runcStarted(this.root, c.runcId)) c.ready = true;
          } else this.probe(replica, c, c.readiness, now, (ok) => (c.ready = ok));
          if (c.liveness) this.probe(replica, c, c.liveness, now, (ok) => !ok && this.kill(replica, c, 'its liveness probe failed'));
        }
        this.changed(replica);
      }
    }
    // Traffic that rose, or fell out of the window the reconciler asked about, may change the replica count.
    for (const [id, d] of this.demands) {
      const demand = this.ingress.demand(id, d.windowMs);
      const now = `${demand.concurrency}|${demand.rps}`;
      if (now === d.reported) continue;
      d.reported = now;
      for (const listener of this.listeners) listener(d.ref);
    }
    void this.flushLogs(LOG_BATCHES_PER_TICK);
  }

  private probe(replica: Replica, c: Container, state: ProbeState, now: number, settle: (ok: boolean) => void): void {
    if (state.running || now < state.nextAt) return;
    state.running = true;
    const p = state.probe;
    const timeoutMs = Math.max(1, p.timeoutSeconds ?? 1) * 1000;
    void this.check(replica, c, p, timeoutMs).then((failure) => {
      state.running = false;
      state.nextAt = Date.now() + Math.max(1, p.periodSeconds ?? 10) * 1000;
      state.failure = failure;
      if (failure === undefined) {
        state.successes++;
        state.failures = 0;
        if (state.successes >= Math.max(1, p.successThreshold ?? 1)) settle(true);
      } else {
        state.failures++;
        state.successes = 0;
        if (state.failures >= Math.max(1, p.failureThreshold ?? 3)) settle(false);
      }
      this.changed(replica);
    });
  }

  /** Runs a probe once: undefined when it passed, else what failed. */
  private async check(replica: Replica, c: Container, p: Probe, timeoutMs: number): Promise<string | undefined> {
    const address = replica.address;
    if (!address || c.exited) return 'the container is not running';
    if (p.httpGet) {
      const port = Number(p.httpGet.port ?? firstPort([c.spec]) ?? 8080);
      const path = p.httpGet.path ?? '/';
      return new Promise((resolve) => {
        const headers = Object.fromEntries((p.httpGet!.httpHeaders ?? []).map((h) => [h.name, h.value]));
        const req = httpRequest({ host: address, port, path, headers, timeout: timeoutMs }, (res) => {
          res.resume();
          const code = res.statusCode ?? 0;
          resolve(code >= 200 && code < 400 ? undefined : `HTTP GET ${path} on port ${port} answered ${code}`);
        });
        req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
        req.on('error', (err) => resolve(`HTTP GET ${path} on port ${port}: ${(err as NodeJS.ErrnoException).code === 'ECONNREFUSED' ? 'connection refused (nothing listens on the port)' : err.message}`));
        req.end();
      });
    }
    if (p.tcpSocket) {
      const port = Number(p.tcpSocket.port ?? firstPort([c.spec]) ?? 8080);
      return new Promise((resolve) => {
        const socket = connect({ host: address, port, timeout: timeoutMs });
        socket.on('connect', () => (socket.destroy(), resolve(undefined)));
        socket.on('timeout', () => (socket.destroy(), resolve(`TCP connect to port ${port}: no answer within ${timeoutMs} ms`)));
        socket.on('error', (err) => resolve(`TCP connect to port ${port}: ${(err as NodeJS.ErrnoException).code === 'ECONNREFUSED' ? 'connection refused (nothing listens on the port)' : err.message}`));
      });
    }
    if (p.exec?.command?.length) {
      return command('runc', ['--root', this.root, 'exec', c.runcId, ...p.exec.command], { timeoutMs }).then(
        () => undefined,
        (err) => `command ${p.exec!.command!.join(' ')} failed${err instanceof CommandError && err.code !== null ? ` with exit code ${err.code}` : ''}`,
      );
    }
    return undefined;
  }

  private kill(replica: Replica, c: Container, why: string): void {
    if (c.exited) return;
    this.log(replica, c, `Killing container ${c.name} of replica ${replica.want.name}: ${why}`);
    void quietly('runc', ['--root', this.root, 'kill', c.runcId, 'KILL']);
  }

  removeVolumeSet(org: string, gvc: string, name: string): void {
    const dir = volumeSetDir(this.dir, org, gvc, name);
    void this.volumeDisks
      .unmountUnder(dir)
      .then(() => rmSync(dir, { recursive: true, force: true }))
      .catch((err) => this.options.onError(err, `removing the data of volume set ${name}`));
  }

  stopReplica(deployment: Omit<DeploymentRef, 'host'>, name: string): boolean {
    const replica = this.deployments.get(deploymentId(deployment))?.get(name);
    if (!replica) return false;
    for (const c of replica.containers) this.kill(replica, c, 'stopped on request (replica stop)');
    return true;
  }

  /** The replica a terminal or port-forward request names, if it is one of this process's. */
  private replicaAt(target: ExecTarget): Replica | undefined {
    for (const replicas of this.deployments.values()) {
      const replica = replicas.get(target.replica);
      if (replica && replica.ref.org === target.org && replica.ref.gvc === target.gvc && replica.ref.location === target.location) return replica;
    }
    return undefined;
  }

  portForward(target: ExecTarget, port: number): Forward {
    const replica = this.replicaAt(target);
    if (!replica) return { error: `no replica ${target.replica} runs in location ${target.location} of GVC ${target.gvc}` };
    return forwardTo(replica.ref.workload, target.replica, replica.address, this.stateOf(replica).running, port);
  }

  exec(target: ExecTarget, args: string[], tty = false): { workload: string; start: () => ChildProcess } | { workload?: string; error: string } {
    const replica = this.replicaAt(target);
    if (!replica) return { error: `no replica ${target.replica} runs in location ${target.location} of GVC ${target.gvc}` };
    const c = replica.containers.find((x) => target.container === undefined || x.name === target.container);
    const workload = replica.ref.workload;
    if (!c) return { workload, error: `replica ${target.replica} has no running container ${target.container ?? ''} (${this.stateOf(replica).message})` };
    if (c.exited || !runcStarted(this.root, c.runcId)) return { workload, error: `container ${c.name} of replica ${target.replica} is not running (${this.stateOf(replica).message})` };
    const runc = ['runc', '--root', this.root, 'exec', ...(tty ? ['--tty'] : []), c.runcId, ...args];
    // runc's --tty wants a terminal of its own to copy the container's from: script(1) gives it one on our pipes.
    const [file, argv] = tty ? ['script', ['--quiet', '--flush', '--return', '--command', runc.map(shellQuote).join(' '), '/dev/null']] : [runc[0], runc.slice(1)];
    return { workload, start: () => spawn(...underUsualUmask(file, argv), { stdio: ['pipe', 'pipe', 'pipe'] }) };
  }

  /**
   * Where a request goes: the ready replicas' addresses of the workload its Host names (a domain's
   * route, or the endpoint's first label) or the path form names, the port, and how long it may wait.
   */
  private route(host: string | undefined, path: string, hostname: string): ReturnType<ConstructorParameters<typeof Ingress>[0]> {
    const domain = this.domains.match(hostname, path);
    if (domain && 'status' in domain) return domain;
    const m = domain ? null : /^\/-workload\/([^/]+)\/([^/]+)\/([^/?]+)(.*)$/.exec(path);
    let suspended: DeploymentRef | undefined;
    for (const [id, ref] of this.routed(domain ? [workloadKey(domain)] : [...(m ? [workloadKey({ org: m[1], gvc: m[2], workload: m[3] })] : []), ...(host === undefined ? [] : [`host|${host}`])])) {
      const byPath = m !== null && m[1] === ref.org && m[2] === ref.gvc && m[3] === ref.workload;
      // Only this deployment's replicas are looked at: a request costs no walk over every replica.
      const replicas = [...(this.deployments.get(id)?.values() ?? [])].filter((r) => !r.want.run);
      const waking = this.waking.get(id);
      if (replicas.length === 0 && !waking) {
        if (this.suspended.has(id)) suspended ??= ref;
        continue;
      }
      const spec = replicas[0]?.want.spec ?? waking!.wake.spec;
      const holdMs = waking?.wake.holdMs ?? 0;
      if (domain) {
        const { workload, gvc } = domain;
        const ready = this.ready(replicas).filter((r) => domain.replica === undefined || r.want.name === `${workload}-${domain.replica}`);
        if (domain.replica !== undefined && ready.length === 0 && holdMs === 0) {
          return { status: 503, message: `domain '${domain.domain}' routes to workload '${workload}' of GVC '${gvc}', replica ${domain.replica} (${workload}-${domain.replica}), which is not running and ready` };
        }
        const port = domain.port ?? firstPort((spec.containers ?? []) as ContainerSpec[]) ?? 8080;
        return { key: id, targets: ready.map((r) => r.address!), port, path: domain.path, headers: domain.headers, holdMs, firewall: { config: spec.firewallConfig, workload: `workload '${workload}' of GVC '${gvc}'` } };
      }
      const ready = this.ready(replicas);
      const port = firstPort((spec.containers ?? []) as ContainerSpec[]) ?? 8080;
      const rest = byPath ? m![4] || '/' : path;
      return { key: id, targets: ready.map((r) => r.address!), port, path: rest.startsWith('/') ? rest : `/${rest}`, holdMs, firewall: { config: spec.firewallConfig, workload: `workload '${ref.workload}' of GVC '${ref.gvc}'` } };
    }
    if (suspended) {
      const { workload, gvc } = suspended;
      return { status: 503, message: `workload '${workload}' of GVC '${gvc}' is suspended: no replica serves it. Resume it with 'cpln workload start ${workload} --gvc ${gvc}' (spec.defaultOptions.suspend: false)` };
    }
    if (domain) return { status: 503, message: `domain '${domain.domain}' routes to workload '${domain.workload}' of GVC '${domain.gvc}', which runs no replica here (it does not exist, or is not deployed yet)` };
    return undefined;
  }

  /** Puts a deployment under the keys a request names it by, or takes it out: as deploymentRefs has it now. */
  private reindex(id: string): void {
    for (const key of this.routeKeys.get(id) ?? []) {
      const ids = this.routes.get(key)!;
      ids.delete(id);
      if (ids.size === 0) this.routes.delete(key);
    }
    this.routeKeys.delete(id);
    const ref = this.deployments.get(id)?.values().next().value?.ref ?? this.waking.get(id)?.ref ?? this.suspended.get(id);
    if (!ref) return;
    const keys = [`host|${ref.host}`, workloadKey(ref)];
    for (const key of keys) {
      const ids = this.routes.get(key) ?? new Map<string, DeploymentRef>();
      this.routes.set(key, ids.set(id, ref));
    }
    this.routeKeys.set(id, keys);
  }

  /**
   * The deployments under any of `keys`, as deploymentRefs orders them: those running replicas, then
   * those that wake on a request, then the suspended ones.
   */
  private routed(keys: string[]): Array<[string, DeploymentRef]> {
    const found = new Map<string, DeploymentRef>();
    for (const key of keys) for (const [id, ref] of this.routes.get(key) ?? []) found.set(id, ref);
    const rank = (id: string) => (this.deployments.get(id)?.size ? 0 : this.waking.has(id) ? 1 : 2);
    return [...found].sort(([a], [b]) => rank(a) - rank(b));
  }

  /** Of a deployment's replicas, those traffic may go to: ready, with an address. */
  private ready(replicas: Replica[]): Replica[] {
    return replicas.filter((r) => r.address && this.stateOf(r).ready);
  }

  /** The workload endpoints with a ready replica, which HAProxy serves without Keel. */
  private frontTable(): FrontRoute[] {
    const table: FrontRoute[] = [];
    for (const [id, ref] of this.deploymentRefs()) {
      const replicas = [...(this.deployments.get(id)?.values() ?? [])].filter((r) => !r.want.run && !r.removed);
      const targets = this.ready(replicas).map((r) => r.address!);
      if (targets.length === 0) continue;
      const spec = replicas[0].want.spec;
      const port = firstPort((spec.containers ?? []) as ContainerSpec[]) ?? 8080;
      // A workload whose firewall filters headers is served through Keel's ingress, which applies them.
      const firewall = this.options.firewall === 'open' ? undefined : frontRules(spec.firewallConfig);
      if (this.options.firewall !== 'open' && !firewall) continue;
      table.push({ key: id, host: `${ref.host}.localhost`, targets, port, firewall, workload: `workload '${ref.workload}' of GVC '${ref.gvc}'` });
    }
    return table;
  }

  /** Each deployment this runtime knows, by its replicas or, with none running, as one that wakes on a request or is suspended. */
  private *deploymentRefs(): Iterable<[string, DeploymentRef]> {
    for (const [id, replicas] of this.deployments) {
      const first = replicas.values().next().value as Replica | undefined;
      if (first) yield [id, first.ref];
    }
    for (const [id, { ref }] of this.waking) if (!this.deployments.get(id)?.size) yield [id, ref];
    for (const [id, ref] of this.suspended) if (!this.deployments.get(id)?.size && !this.waking.has(id)) yield [id, ref];
  }

  private fingerprint(r: Replica): string {
    const s = this.stateOf(r);
    return `${s.running}|${s.ready}|${s.restarts}|${s.message}|${s.finished?.exitCode}`;
  }

  private changed(replica: Replica): void {
    if (replica.removed || this.stopped) return;
    const now = this.fingerprint(replica);
    if (now === replica.reported) return;
    replica.reported = now;
    // Requests held for the deployment go to the replica that became ready.
    this.ingress.retry(deploymentId(replica.ref));
    this.names.refresh();
    this.front?.changed();
    this.firewall.refresh(this.peers());
    for (const listener of this.listeners) listener(replica.ref);
  }

  /** Every replica with an address, not being removed: whose it is, where, whether traffic may go to it (as the ingress decides). */
  peers(): Peer[] {
    const peers: Peer[] = [];
    for (const replicas of this.deployments.values()) {
      for (const r of replicas.values()) {
        if (r.address && !r.removed) peers.push({ org: r.ref.org, gvc: r.ref.gvc, workload: r.ref.workload, replica: r.want.name, address: r.address, ready: this.stateOf(r).ready, spec: r.want.spec });
      }
    }
    return peers;
  }

  /** A line of Keel's own about a replica, in its logs (after what `container` wrote before it). */
  private log(replica: Replica, container: Container | undefined, line: string): void {
    const { gvc, workload, location } = replica.ref;
    const labels = { gvc, workload, location, replica: replica.want.name };
    this.output.own(replica.id, replica.ref.org, labels, container ? { ...labels, container: container.name } : labels, line, container?.runcId);
  }

  /**
   * Writes the lines waiting in the output thread to the store, a bounded batch per transaction (one
   * batch holds the store's writer, and the event loop on SQLite, for a few ms), at most `batches`.
   */
  private async flushLogs(batches: number): Promise<void> {
    if (this.writingLogs) return;
    let done!: () => void;
    this.writingLogs = new Promise<void>((resolve) => (done = resolve));
    try {
      for (let i = 0; i < batches; i++) {
        const { lines, more } = await this.output.take(LOG_BATCH_LINES, LOG_BATCH_BYTES);
        if (lines.length > 0) {
          const stamped: NewLogLine[] = lines.map((l) => ({ org: l.org, ts: stamp(l.ms), labels: l.labels, line: l.line }));
          await this.options.store.transaction((tx) => tx.appendLogs(stamped));
        }
        if (!more) break;
        // Requests waiting on the event loop go before the next batch.
        await new Promise((resolve) => setImmediate(resolve));
      }
    } catch (err) {
      this.options.onError(err, 'writing replica logs');
    } finally {
      this.writingLogs = false;
      done();
    }
  }
}

function probeState(probe: Probe | undefined): ProbeState | undefined {
  if (!probe || (!probe.httpGet && !probe.tcpSocket && !probe.exec)) return undefined;
  return { probe, nextAt: Date.now() + Math.max(0, probe.initialDelaySeconds ?? 0) * 1000, successes: 0, failures: 0, running: false };
}

/** The first port a container of the workload declares (the one its endpoint serves). */
/** Whether runc has started the container's process (its state file says running). */
function runcStarted(root: string, id: string): boolean {
  return existsSync(join(root, id, 'state.json'));
}

/** Resolves once runc has started the container's process (it writes the pid file after) or has exited. */
function startedOrExited(child: ChildProcess, pidFile: string): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      watcher.close();
      child.off('exit', done);
      child.off('error', done);
      resolve();
    };
    // runc writes it under a temporary name and renames it: the directory's watcher sees the rename.
    const watcher = watch(dirname(pidFile), () => existsSync(pidFile) && done());
    child.once('exit', done);
    child.once('error', done);
    if (existsSync(pidFile) || child.exitCode !== null || child.signalCode !== null) done();
  });
}

function exitOf(c: Container, timeoutMs: number): Promise<void> {
  if (c.exited || !c.child || c.child.exitCode !== null || c.child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, timeoutMs);
    c.child!.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

async function unmount(path: string): Promise<void> {
  if (!existsSync(path)) return;
  await quietly('umount', [path]);
}

/** runc's own reason when it could not start the process (a command missing from the image), from its log. */
function runcFailure(bundle: string): string | undefined {
  let text = '';
  try {
    text = readFileSync(join(bundle, 'runc.log'), 'utf8');
  } catch {
    return undefined;
  }
  const errors = text
    .split('\n')
    .map((line) => {
      try {
        return JSON.parse(line) as { level?: string; msg?: string };
      } catch {
        return {};
      }
    })
    .filter((e) => e.level === 'error' && typeof e.msg === 'string');
  const last = errors.at(-1)?.msg;
  return last?.replace(/^runc run failed: /, '');
}

/** One word for sh, whatever it holds. */
function shellQuote(word: string): string {
  return `'${word.replace(/'/g, `'\\''`)}'`;
}
