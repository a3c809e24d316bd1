// A workload's firewallConfig, enforced (KEEL_FIREWALL=enforce, the default; `open` admits
// everything for demos, except another org's replicas, which are never reachable).
// - External inbound, at the ingress (Keel's own and HAProxy's): a request is refused 403 unless
//   `external.inboundAllowCIDR` admits the client's address, `inboundBlockedCIDR` does not, and the
//   request passes `external.http.inboundHeaderFilter`. The client's address is the connection's
//   peer (behind HAProxy, the one HAProxy names), never a header the client sent.
// - Internal inbound and outbound, in the kernel: one nftables `ip` table per data directory
//   (`keel-SCOPE`), written whole and replaced in one `nft -f` transaction whenever the replicas
//   change. The bridge hands its IPv4 frames to the ip hooks (the bridge's own nf_call_iptables),
//   so traffic between replicas on it meets the table's forward chain with connection tracking:
//   a refused connection gets a reset (or an ICMP refusal) at once, never a silent drop. Replicas
//   always reach the gateway (this host: names, Keel's API), and this host (the ingress, probes)
//   always reaches them: that traffic never crosses the forward chain.
import { BlockList, isIPv4 } from 'node:net';
import { lookup } from 'node:dns/promises';
import { writeFileSync } from 'node:fs';
import type { IncomingHttpHeaders } from 'node:http';
import { join } from 'node:path';
import { parseLink } from '../resources/links.js';
import { wholeValueMatch } from '../linear-regexp.js';
import { command, quietly } from './command.js';
import { Forwarding } from './forwarding.js';
import type { Peer } from './peers.js';

export type FirewallMode = 'enforce' | 'open';

interface External {
  allow: BlockList;
  block: BlockList;
  headers: Array<{ key: string; allowed?: RegExp[]; blocked?: RegExp[] }>;
  allowed: string[];
  blocked: string[];
  /** Addresses already decided: undefined (admitted), or which list refuses them. Few clients make most requests. */
  verdicts: Map<string, 'blocked' | 'not-allowed' | undefined>;
}

/** Addresses remembered per workload's rules; past it, the memory starts over. */
const VERDICTS_MAX = 1024;

/** Compiled external rules, by the firewallConfig object they came from (a spec is never changed in place). */
const compiled = new WeakMap<object, External>();
const NONE = {};

const IPV4_CIDR = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})(?:\/(\d{1,2}))?$/;

/** An IPv4 CIDR (or address) in a form nft and HAProxy accept, or undefined for anything else. */
export function ipv4Cidr(text: unknown): string | undefined {
  const m = typeof text === 'string' ? IPV4_CIDR.exec(text.trim()) : null;
  if (!m || m.slice(1, 5).some((o) => Number(o) > 255) || (m[5] !== undefined && Number(m[5]) > 32)) return undefined;
  return m[5] === undefined ? `${m.slice(1, 5).map(Number).join('.')}/32` : `${m.slice(1, 5).map(Number).join('.')}/${Number(m[5])}`;
}

function blockList(cidrs: unknown): { list: BlockList; kept: string[] } {
  const list = new BlockList();
  const kept: string[] = [];
  for (const text of Array.isArray(cidrs) ? cidrs : []) {
    if (typeof text !== 'string') continue;
    const [address, bits] = text.trim().split('/');
    const type = isIPv4(address) ? 'ipv4' : address.includes(':') ? 'ipv6' : undefined;
    if (!type) continue;
    const prefix = bits === undefined ? (type === 'ipv4' ? 32 : 128) : Number(bits);
    try {
      list.addSubnet(address, prefix, type);
      kept.push(text.trim());
    } catch {
      // Not an address Node parses: it admits or blocks nothing.
    }
  }
  return { list, kept };
}

/**
 * A header filter's value pattern: a regular expression matched against the whole value, in linear
 * time (a literal when it is none: one stored before patterns were checked on write).
 */
function pattern(text: string): RegExp {
  try {
    return wholeValueMatch(text);
  } catch {
    return wholeValueMatch(text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  }
}

function external(config: Record<string, any> | undefined): External {
  const key = config ?? NONE;
  let rules = compiled.get(key);
  if (rules) return rules;
  const ext = config?.external ?? {};
  const allow = blockList(ext.inboundAllowCIDR);
  const block = blockList(ext.inboundBlockedCIDR);
  const headers = (Array.isArray(ext.http?.inboundHeaderFilter) ? ext.http.inboundHeaderFilter : [])
    .filter((f: any) => f && typeof f.key === 'string')
    .map((f: any) => ({
      key: f.key.toLowerCase(),
      allowed: Array.isArray(f.allowedValues) && f.allowedValues.length ? f.allowedValues.map(String).map(pattern) : undefined,
      blocked: Array.isArray(f.blockedValues) && f.blockedValues.length ? f.blockedValues.map(String).map(pattern) : undefined,
    }));
  rules = { allow: allow.list, block: block.list, headers, allowed: allow.kept, blocked: block.kept, verdicts: new Map() };
  compiled.set(key, rules);
  return rules;
}

/** The client address as the firewall compares it (an IPv4 address mapped into IPv6 is its IPv4 form). */
function plain(address: string): { address: string; type: 'ipv4' | 'ipv6' } {
  const bare = address.startsWith('::ffff:') && isIPv4(address.slice(7)) ? address.slice(7) : address;
  return { address: bare, type: isIPv4(bare) ? 'ipv4' : 'ipv6' };
}

/**
 * Why the workload's external firewall refuses a request from `client` with `headers`, or
 * undefined when it admits it. `workload` names the workload in the refusal.
 */
export function externalRefusal(config: Record<string, any> | undefined, client: string, headers: IncomingHttpHeaders, workload: string): string | undefined {
  const rules = external(config);
  const { address, type } = plain(client);
  const open = `open it with spec.firewallConfig.external.inboundAllowCIDR (KEEL_FIREWALL=open opens every endpoint)`;
  if (!address) return `${workload}'s firewall admits no client whose address is unknown`;
  let verdict = rules.verdicts.get(address);
  if (verdict === undefined && !rules.verdicts.has(address)) {
    verdict = rules.block.check(address, type) ? 'blocked' : rules.allow.check(address, type) ? undefined : 'not-allowed';
    if (rules.verdicts.size >= VERDICTS_MAX) rules.verdicts.clear();
    rules.verdicts.set(address, verdict);
  }
  if (verdict === 'blocked') return `${workload}'s firewall blocks ${address} (spec.firewallConfig.external.inboundBlockedCIDR)`;
  if (verdict === 'not-allowed') return `${workload}'s firewall does not admit external traffic from ${address}: ${open}`;
  for (const filter of rules.headers) {
    const raw = headers[filter.key];
    const values = raw === undefined ? [] : Array.isArray(raw) ? raw : [raw];
    if (filter.blocked && values.some((v) => filter.blocked!.some((p) => p.test(v)))) {
      return `${workload}'s firewall refuses this request's ${filter.key} header (spec.firewallConfig.external.http.inboundHeaderFilter)`;
    }
    if (filter.allowed && !values.some((v) => filter.allowed!.some((p) => p.test(v)))) {
      return `${workload}'s firewall admits only requests whose ${filter.key} header matches its allowedValues (spec.firewallConfig.external.http.inboundHeaderFilter)`;
    }
  }
  return undefined;
}

/**
 * The external rules HAProxy can apply itself, as IPv4 CIDRs: undefined when the workload has
 * header filters (Keel's ingress applies those: HAProxy sends its requests there).
 */
export function frontRules(config: Record<string, any> | undefined): { allow: string[]; block: string[] } | undefined {
  const rules = external(config);
  if (rules.headers.length > 0) return undefined;
  const v4 = (list: string[]) => list.map(ipv4Cidr).filter((c): c is string => c !== undefined);
  return { allow: v4(rules.allowed), block: v4(rules.blocked) };
}

/** `replica` may be reached from `from` (both of one org) under its workload's internal rules. */
function admitsInternal(to: Peer, from: Peer, mode: FirewallMode): boolean {
  if (to.org !== from.org) return false;
  if (mode === 'open' || (to.gvc === from.gvc && to.workload === from.workload)) return true;
  const internal = to.spec.firewallConfig?.internal ?? {};
  switch (internal.inboundAllowType) {
    case 'same-org':
      return true;
    case 'same-gvc':
      return to.gvc === from.gvc;
    case 'workload-list':
      return (Array.isArray(internal.inboundAllowWorkload) ? internal.inboundAllowWorkload : []).some((link: unknown) => {
        const target = typeof link === 'string' ? parseLink(link) : undefined;
        return target?.kind === 'workload' && target.org === from.org && target.gvc === from.gvc && target.name === from.workload;
      });
    default:
      return false;
  }
}

/**
 * What a replica may reach beyond the bridge under its workload's `firewallConfig.external` (all of
 * it under KEEL_FIREWALL=open): `allowed` CIDRs on `ports` (empty: any port; undefined: none, as
 * `outboundAllowPort` names no valid one), never `blocked`, and `hostnames` on ports 80 and 443.
 */
export function outbound(spec: Record<string, any> | undefined, mode: FirewallMode): { allowed: string[]; blocked: string[]; ports: number[] | undefined; hostnames: string[] } {
  if (mode === 'open') return { allowed: ['0.0.0.0/0'], blocked: [], ports: [], hostnames: [] };
  const out = spec?.firewallConfig?.external ?? {};
  const cidrs = (list: unknown) => [...new Set((Array.isArray(list) ? list : []).map(ipv4Cidr).filter((c): c is string => c !== undefined))];
  const given = Array.isArray(out.outboundAllowPort) ? out.outboundAllowPort : [];
  const ports: number[] = [...new Set<number>(given.map((x: any) => Number(x?.number)).filter((n: number) => Number.isInteger(n) && n > 0 && n < 65536))];
  const hostnames = (Array.isArray(out.outboundAllowHostname) ? out.outboundAllowHostname : []).filter((h: unknown): h is string => typeof h === 'string' && h.length > 0);
  return { allowed: cidrs(out.outboundAllowCIDR), blocked: cidrs(out.outboundBlockedCIDR), ports: given.length && !ports.length ? undefined : ports, hostnames };
}

const REFUSE = 'meta l4proto tcp reject with tcp reset\n    reject with icmp type admin-prohibited';
/** How often hostnames in outboundAllowHostname are looked up again while a replica allows them. */
const RESOLVE_EVERY_MS = 60_000;

export interface KernelOptions {
  /** Names the table (keel-SCOPE). */
  scope: string;
  bridge: string;
  /** The replicas' subnet, `a.b.c.d/n`. */
  subnet: string;
  mode: FirewallMode;
  /** Where the last ruleset written is kept (for a look when something goes wrong). */
  dir: string;
  /** Where IPv4 settings are and marks kept, for a test that runs elsewhere (forwarding.ts). */
  sysctl?: string;
  marks?: string;
  onError: (err: unknown) => void;
}

/** The kernel's part: internal inbound and outbound rules for every replica on the bridge. */
export class KernelFirewall {
  private readonly table: string;
  private written = '';
  private running: Promise<void> = Promise.resolve();
  private pending?: Peer[];
  private resolved = new Map<string, { at: number; addresses: string[] }>();
  private timer?: NodeJS.Timeout;
  private stopped = false;
  private readonly forwarding: Forwarding;

  constructor(private readonly options: KernelOptions) {
    this.table = `keel-${options.scope}`;
    this.forwarding = new Forwarding({ scope: options.scope, bridge: options.bridge, sysctl: options.sysctl, marks: options.marks });
  }

  /** The replicas have changed: the table is rewritten (one write at a time, the latest peers). */
  refresh(peers: Peer[]): void {
    if (this.stopped) return;
    const first = this.pending === undefined;
    this.pending = peers;
    if (!first) return;
    this.running = this.running.then(async () => {
      const now = this.pending!;
      this.pending = undefined;
      try {
        await this.apply(now);
      } catch (err) {
        this.options.onError(err);
      }
    });
  }

  /** Waits for the write under way. */
  settled(): Promise<void> {
    return this.running;
  }

  private async apply(peers: Peer[]): Promise<void> {
    const o = this.options;
    const addressed = peers.filter((p) => isIPv4(p.address));
    const pairs: string[] = [];
    for (const to of addressed) for (const from of addressed) if (to !== from && admitsInternal(to, from, o.mode)) pairs.push(`${from.address} . ${to.address}`);
    const egress: string[] = [];
    /** Where replicas may go: forwarding is on for the interfaces that leads through (forwarding.ts). */
    const destinations: string[] = [];
    let hostnames = false;
    for (const p of addressed) {
      const out = outbound(p.spec, o.mode);
      if (out.blocked.length) egress.push(`ip saddr ${p.address} ip daddr { ${out.blocked.join(', ')} } goto refuse`);
      if (out.allowed.length && out.ports !== undefined) {
        egress.push(`ip saddr ${p.address} ip daddr { ${out.allowed.join(', ')} }${out.ports.length ? ` tcp dport { ${out.ports.join(', ')} }` : ''} accept`);
        destinations.push(...out.allowed);
      }
      if (out.hostnames.length) {
        hostnames = true;
        const addresses = [...new Set((await Promise.all(out.hostnames.map((n) => this.resolve(n)))).flat())];
        if (addresses.length) egress.push(`ip saddr ${p.address} ip daddr { ${addresses.join(', ')} } tcp dport { 80, 443 } accept`);
        destinations.push(...addresses.map((a) => `${a}/32`));
      }
    }
    const turnOn = await this.forwarding.need([...new Set(destinations)]);
    const uplinks = this.forwarding.marked().map((dev) => `"${dev}"`);
    const br = `"${o.bridge}"`;
    const ruleset = [
      `table ip ${this.table} {}`,
      `delete table ip ${this.table}`,
      `table ip ${this.table} {`,
      `  set inside { type ipv4_addr . ipv4_addr; ${pairs.length ? `elements = { ${pairs.join(', ')} }` : ''} }`,
      '  chain refuse {',
      `    ${REFUSE}`,
      '  }',
      '  chain forward {',
      '    type filter hook forward priority 0; policy accept;',
      `    iifname ${br} ct state established,related accept`,
      `    oifname ${br} ct state established,related accept`,
      // Between replicas on the bridge: only the pairs their workloads' internal rules admit.
      `    iifname ${br} oifname ${br} ip saddr . ip daddr @inside accept`,
      `    iifname ${br} oifname ${br} goto refuse`,
      // Routed in from anywhere else (another Keel's bridge, another interface): never.
      `    oifname ${br} goto refuse`,
      // Interfaces forwarding only for replicas' answers: nothing new is routed in through them.
      ...(uplinks.length ? [`    iifname { ${uplinks.join(', ')} } ct state new goto refuse`] : []),
      ...egress.map((rule) => `    iifname ${br} ${rule}`),
      `    iifname ${br} goto refuse`,
      '  }',
      '  chain postrouting {',
      '    type nat hook postrouting priority srcnat; policy accept;',
      `    ip saddr ${o.subnet} oifname != ${br} masquerade`,
      '  }',
      '}',
      '',
    ].join('\n');
    if (ruleset !== this.written) {
      writeFileSync(join(o.dir, 'firewall.nft'), ruleset);
      await command('nft', ['-f', join(o.dir, 'firewall.nft')]);
      this.written = ruleset;
    }
    turnOn();
    clearTimeout(this.timer);
    this.timer = undefined;
    if (hostnames && !this.stopped) {
      this.timer = setTimeout(() => this.refresh(peers), RESOLVE_EVERY_MS);
      this.timer.unref();
    }
  }

  /** A hostname's IPv4 addresses (a wildcard name `*.x` stands for `x`), looked up at most once a RESOLVE_EVERY_MS. */
  private async resolve(name: string): Promise<string[]> {
    const host = name.replace(/^\*\./, '');
    const known = this.resolved.get(host);
    if (known && Date.now() - known.at < RESOLVE_EVERY_MS) return known.addresses;
    const addresses = await lookup(host, { all: true, family: 4 }).then(
      (all) => all.map((a) => a.address).filter(isIPv4),
      () => known?.addresses ?? [],
    );
    this.resolved.set(host, { at: Date.now(), addresses });
    return addresses;
  }

  /** Removes the table (Keel stops). */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running;
    this.forwarding.release();
    await quietly('nft', ['delete', 'table', 'ip', this.table]);
    this.written = '';
  }
}
