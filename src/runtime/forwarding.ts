// IPv4 forwarding for replicas' egress, turned on per interface and only where egress needs it,
// never host-wide (`net.ipv4.ip_forward` and `conf/all/forwarding` are left as they are).
//
// The kernel forwards a packet only when the interface it came in on forwards
// (`conf/IFACE/forwarding`). A replica's connection out enters on the bridge; its answers, after
// the masquerade is undone, enter on the interface the destination is routed through (the
// uplink). So forwarding is always on for the bridge (what a replica may not reach then meets the
// table's refusal, a reset at once, rather than a silent drop and a timeout), and for the uplinks
// the allowed destinations are routed through (every route that overlaps an allowed CIDR: the
// default route's interface for most). An uplink that did not forward already is turned on and
// marked, in MARKS/IFACE/SCOPE (under /run, which goes with a reboot as the setting does), one
// file per Keel data directory that needs it; the last Keel to let it go turns it off again. An
// uplink that forwarded already (the host's own choice, a container engine's) is never touched.
//
// What stays interface-wide: forwarding on an uplink applies to whatever comes in on it, not only
// to replicas' answers. So every Keel's nftables table refuses new connections that come in on a
// marked uplink (`marked()`): only answers to connections made from elsewhere are forwarded
// (a replica's, through the masquerade), and the host forwards nothing new between unrelated
// interfaces because of Keel.
import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { command } from './command.js';
import { isKeelBridge } from './network.js';

export interface ForwardingOptions {
  /** This data directory's scope: names its marks. */
  scope: string;
  bridge: string;
  /** `/proc/sys/net/ipv4` unless a test runs elsewhere. */
  sysctl?: string;
  /** Where the marks of uplinks Keel turned on are kept: `/run/keel/forwarding` unless a test keeps its own. */
  marks?: string;
}

interface Route {
  dst: string;
  dev?: string;
  type?: string;
}

const toNumber = (address: string) => address.split('.').reduce((a, o) => a * 256 + Number(o), 0);

/** The base and size of an IPv4 CIDR (`default` is 0.0.0.0/0; an address alone a /32). */
function range(cidr: string): { base: number; size: number } {
  const [address, bits] = cidr === 'default' ? ['0.0.0.0', '0'] : cidr.split('/');
  const size = 2 ** (32 - Number(bits ?? 32));
  return { base: Math.floor(toNumber(address) / size) * size, size };
}

function overlaps(a: string, b: string): boolean {
  const x = range(a);
  const y = range(b);
  return x.base < y.base + y.size && y.base < x.base + x.size;
}

export class Forwarding {
  private readonly sysctl: string;
  private readonly marks: string;

  constructor(private readonly options: ForwardingOptions) {
    this.sysctl = options.sysctl ?? '/proc/sys/net/ipv4';
    this.marks = options.marks ?? '/run/keel/forwarding';
  }

  /**
   * Forwarding for replicas that may reach `destinations` (IPv4 CIDRs; none: no replica may go
   * out). What is no longer needed is turned off at once; the uplinks newly needed are marked (so
   * that `marked()` names them in the table) and turned on, with the bridge (once it exists), by
   * the function this returns, to call once the table that refuses new connections coming in on
   * them is written.
   */
  async need(destinations: string[]): Promise<() => void> {
    const uplinks = new Set<string>();
    if (destinations.length) {
      const routes = JSON.parse((await command('ip', ['-4', '-j', 'route', 'show', 'table', 'all'])) || '[]') as Route[];
      for (const r of routes) {
        if (!r.dev || (r.type && r.type !== 'unicast') || r.dev === 'lo' || r.dev === this.options.bridge || isKeelBridge(r.dev)) continue;
        if (destinations.some((d) => overlaps(d, r.dst))) uplinks.add(r.dev);
      }
    }
    this.letGo(uplinks);
    const turnOn: string[] = [];
    for (const dev of uplinks) {
      const dir = join(this.marks, dev);
      if (existsSync(dir)) writeFileSync(join(dir, this.options.scope), '');
      else if (existsSync(this.setting(dev)) && !this.forwards(dev)) {
        mkdirSync(dir, { recursive: true, mode: 0o700 });
        writeFileSync(join(dir, this.options.scope), '');
      } else continue;
      turnOn.push(dev);
    }
    return () => {
      this.set(this.options.bridge, true);
      for (const dev of turnOn) this.set(dev, true);
    };
  }

  /** Lets go of every uplink this data directory holds (Keel stops). */
  release(): void {
    this.letGo(new Set());
  }

  /** The uplinks Keel turned forwarding on for (any Keel's): new connections coming in on them are refused. */
  marked(): string[] {
    return existsSync(this.marks) ? readdirSync(this.marks).filter((dev) => /^[\w.-]{1,15}$/.test(dev)) : [];
  }

  private letGo(kept: Set<string>): void {
    for (const dev of this.marked()) {
      if (kept.has(dev)) continue;
      const dir = join(this.marks, dev);
      rmSync(join(dir, this.options.scope), { force: true });
      try {
        // Fails while another Keel has just marked it as needed: it stays on.
        rmdirSync(dir);
      } catch {
        continue;
      }
      this.set(dev, false);
    }
  }

  private setting(dev: string): string {
    return join(this.sysctl, 'conf', dev, 'forwarding');
  }

  private forwards(dev: string): boolean {
    try {
      return readFileSync(this.setting(dev), 'utf8').trim() === '1';
    } catch {
      return false;
    }
  }

  /** Sets an interface's forwarding (one that is gone has none to set). */
  private set(dev: string, on: boolean): void {
    if (existsSync(this.setting(dev)) && this.forwards(dev) !== on) writeFileSync(this.setting(dev), on ? '1' : '0');
  }
}
