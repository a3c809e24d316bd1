// Replica networking: one Linux bridge per Keel data directory (`kb` and its scope), holding the first address of
// KEEL_RUNTIME_SUBNET (the host's side: Keel's ingress and probes reach replicas through it), and
// one network namespace per replica, joined to the bridge by a veth pair, with the next free
// address. What replicas reach, of each other and beyond the bridge, is the firewall's (firewall.ts).
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { command, quietly } from './command.js';

export interface Subnet {
  base: number;
  bits: number;
}

export function parseSubnet(text: string): Subnet {
  const [address, bits] = text.split('/');
  return { base: address.split('.').reduce((a, o) => a * 256 + Number(o), 0), bits: Number(bits) };
}

/** Whether `name` is a Keel bridge (of any data directory on the host): `kb` and a scope (scopeOf). */
export function isKeelBridge(name: string): boolean {
  return /^kb[0-9a-f]{8}$/.test(name);
}

const dotted = (n: number) => [24, 16, 8, 0].map((s) => Math.floor(n / 2 ** s) % 256).join('.');
const short = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 10);

export class Network {
  readonly bridge: string;
  readonly gateway: string;
  private readonly used = new Set<number>();
  private ready?: Promise<void>;

  /** `scope` (scopeOf) names what belongs to one Keel data directory. */
  constructor(
    private readonly subnet: Subnet,
    private readonly scope: string,
  ) {
    this.bridge = `kb${scope}`;
    this.gateway = dotted(subnet.base + 1);
  }

  /** Names of a replica's namespace and host-side interface, from its container id. */
  names(id: string): { netns: string; veth: string; peer: string } {
    const h = short(id);
    return { netns: `keel-${this.scope}-${id}`, veth: `kv${h}`, peer: `kp${h}` };
  }

  /** Creates the bridge once (idempotent: a bridge left by an earlier start is reused). */
  private up(): Promise<void> {
    this.ready ??= (async () => {
      if (!existsSync(`/sys/class/net/${this.bridge}`)) await command('ip', ['link', 'add', this.bridge, 'type', 'bridge']);
      await quietly('ip', ['addr', 'add', `${this.gateway}/${this.subnet.bits}`, 'dev', this.bridge]);
      // A bridge left to itself takes the lowest hardware address of its ports, so it would change
      // whenever that replica goes: the others' ARP caches would then send the gateway's traffic
      // (names, the API) to a port that is gone, and the forward chain would refuse it. Its own
      // fixed address keeps the gateway where replicas learned it.
      await command('ip', ['link', 'set', 'dev', this.bridge, 'address', macOf(this.gateway)]);
      // Frames between replicas meet the ip hooks, where the firewall's rules are (firewall.ts).
      await command('ip', ['link', 'set', 'dev', this.bridge, 'type', 'bridge', 'nf_call_iptables', '1']);
      await command('ip', ['link', 'set', this.bridge, 'up']);
    })();
    this.ready.catch(() => (this.ready = undefined));
    return this.ready;
  }

  /** Takes `address` (one an adopted replica already holds) or the next free one. */
  allocate(address?: string): string {
    const size = 2 ** (32 - this.subnet.bits);
    if (address) {
      this.used.add(parseSubnet(`${address}/32`).base - this.subnet.base);
      return address;
    }
    for (let i = 2; i < size - 1; i++) {
      if (this.used.has(i)) continue;
      this.used.add(i);
      return dotted(this.subnet.base + i);
    }
    throw new Error(`no free address left in ${dotted(this.subnet.base)}/${this.subnet.bits} (KEEL_RUNTIME_SUBNET)`);
  }

  release(address: string): void {
    this.used.delete(parseSubnet(`${address}/32`).base - this.subnet.base);
  }

  /** The namespace of a replica, with its address on the bridge (created afresh). */
  async attach(id: string, address: string): Promise<string> {
    await this.up();
    const { netns, veth, peer } = this.names(id);
    await this.detach(id);
    await command('ip', ['netns', 'add', netns]);
    // The address's own MAC: a neighbour that still holds the address in its ARP cache (from a
    // replica that held it before) reaches this one, not a MAC that is gone.
    await command('ip', ['link', 'add', veth, 'type', 'veth', 'peer', 'name', peer, 'address', macOf(address)]);
    await command('ip', ['link', 'set', peer, 'netns', netns]);
    await command('ip', ['link', 'set', veth, 'master', this.bridge, 'up']);
    await command('ip', ['-n', netns, 'link', 'set', peer, 'name', 'eth0']);
    await command('ip', ['-n', netns, 'addr', 'add', `${address}/${this.subnet.bits}`, 'dev', 'eth0']);
    await command('ip', ['-n', netns, 'link', 'set', 'eth0', 'up']);
    await command('ip', ['-n', netns, 'link', 'set', 'lo', 'up']);
    await command('ip', ['-n', netns, 'route', 'add', 'default', 'via', this.gateway]);
    return `/var/run/netns/${netns}`;
  }

  /** Removes a replica's namespace and interfaces (whatever of them exists). */
  async detach(id: string): Promise<void> {
    const { netns, veth } = this.names(id);
    if (existsSync(`/sys/class/net/${veth}`)) await quietly('ip', ['link', 'del', veth]);
    if (existsSync(`/var/run/netns/${netns}`)) await quietly('ip', ['netns', 'del', netns]);
  }

  /** Removes the bridge (on shutdown, once no replica is attached). */
  async down(): Promise<void> {
    this.ready = undefined;
    if (existsSync(`/sys/class/net/${this.bridge}`)) await quietly('ip', ['link', 'del', this.bridge]);
  }
}

/** A locally administered hardware address made of an IPv4 address on the bridge (one per address). */
function macOf(address: string): string {
  return `0a:6b:${address.split('.').map((o) => Number(o).toString(16).padStart(2, '0')).join(':')}`;
}
