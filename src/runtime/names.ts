// The replicas' DNS server: `WORKLOAD.GVC.cpln.local` to a workload's ready replicas and
// `REPLICA.WORKLOAD.GVC.cpln.local` to one replica of a stateful workload, as the hosted platform
// names them, on the bridge's gateway address, port 53, UDP and TCP, so that any resolver works
// (busybox, glibc, musl). A replica sees only its own org's names: the org is that of the replica
// at the query's source address, and a source no replica holds is refused. Other names go to the
// host's resolvers only for a replica whose firewall lets it out (firewall.ts's `outbound`): any
// name when it may reach some CIDR, the names of outboundAllowHostname when those are all it may
// reach, none (REFUSED) when it may reach nothing, so that a replica without egress cannot use
// the host's resolvers to send or learn anything beyond the bridge. Every query costs a bounded
// amount: a packet past MAX_PACKET or not a single question is answered FORMERR or dropped, each
// source has a rate, forwarded lookups a ceiling.
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { Resolver } from 'node:dns/promises';
import { createServer, type Server, type Socket } from 'node:net';
import * as packet from 'dns-packet';
import { outbound, type FirewallMode } from './firewall.js';
import type { Peer } from './peers.js';

const SUFFIX = '.cpln.local';
const TTL = 5;
/** The largest query handled (a query is a few dozen bytes; EDNS ones a few more). */
const MAX_PACKET = 4096;
/** Queries one source may make in a second; past it they are dropped (the resolver retries). */
const PER_SOURCE_PER_SECOND = 1_000;
/** Forwarded lookups under way at once, in all and per source; past it, SERVFAIL. */
const FORWARDS_MAX = 64;
const FORWARDS_PER_SOURCE = 8;
const TCP_CONNECTIONS_MAX = 128;
const TCP_IDLE_MS = 10_000;

const NOERROR = 0;
const FORMERR = 1;
const SERVFAIL = 2;
const NXDOMAIN = 3;
const NOTIMP = 4;
const REFUSED = 5;

/** The /etc/resolv.conf of a replica of `gvc`: this server first, its GVC's names found by the short name. */
export function resolvConf(gateway: string, gvc: string): string {
  return `nameserver ${gateway}\nsearch ${gvc}${SUFFIX} ${SUFFIX.slice(1)}\noptions ndots:2 timeout:2 attempts:2\n`;
}

interface Table {
  /** Org by replica address. */
  orgs: Map<string, string>;
  /** Addresses by `org/name` (lower case, without the trailing dot). */
  names: Map<string, string[]>;
  /** Which names outside cpln.local a replica's address may have looked up: any, those of its outboundAllowHostname (absent: none). */
  outside: Map<string, 'any' | string[]>;
}

export class Names {
  private table: Table = { orgs: new Map(), names: new Map(), outside: new Map() };
  private udp?: UdpSocket;
  private tcp?: Server;
  private listening?: Promise<void>;
  private readonly resolver = new Resolver({ timeout: 2_000, tries: 2 });
  private forwards = 0;
  private readonly forwardsBy = new Map<string, number>();
  private readonly rate = new Map<string, number>();
  private rateSecond = 0;

  constructor(
    private readonly gateway: string,
    private readonly peers: () => Peer[],
    private readonly mode: FirewallMode,
    private readonly onError: (err: unknown) => void,
  ) {}

  /** Starts answering on GATEWAY:53 once the bridge holds the address (idempotent). */
  listen(): Promise<void> {
    this.listening ??= (async () => {
      const udp = createSocket('udp4');
      udp.on('message', (msg, from) => this.answer(msg, from.address, false).then((out) => out && udp.send(out, from.port, from.address)));
      udp.on('error', (err) => this.onError(err));
      await new Promise<void>((resolve, reject) => {
        udp.once('error', reject);
        udp.bind(53, this.gateway, () => (udp.off('error', reject), resolve()));
      });
      this.udp = udp;
      const tcp = createServer((socket) => this.serveTcp(socket));
      tcp.maxConnections = TCP_CONNECTIONS_MAX;
      tcp.on('error', (err) => this.onError(err));
      await new Promise<void>((resolve, reject) => {
        tcp.once('error', reject);
        tcp.listen(53, this.gateway, () => (tcp.off('error', reject), resolve()));
      });
      this.tcp = tcp;
      this.refresh();
    })();
    this.listening.catch(() => (this.listening = undefined));
    return this.listening;
  }

  /** Rebuilds the names from the replicas as they are now (called wherever a replica comes, goes, or changes readiness). */
  refresh(): void {
    const orgs = new Map<string, string>();
    const names = new Map<string, string[]>();
    const outside = new Map<string, 'any' | string[]>();
    const add = (key: string, address: string) => {
      const list = names.get(key);
      if (list) list.push(address);
      else names.set(key, [address]);
    };
    for (const p of this.peers()) {
      orgs.set(p.address, p.org);
      const out = outbound(p.spec, this.mode);
      if (out.allowed.length && out.ports !== undefined) outside.set(p.address, 'any');
      else if (out.hostnames.length) outside.set(p.address, out.hostnames.map((h) => h.toLowerCase().replace(/\.$/, '')));
      const workload = `${p.workload}.${p.gvc}${SUFFIX}`.toLowerCase();
      // A workload name is its ready replicas'; a stateful replica's name is its own from the start, as a headless service's is.
      if (p.ready) add(`${p.org}/${workload}`, p.address);
      if (p.spec?.type === 'stateful') add(`${p.org}/${p.replica.toLowerCase()}.${workload}`, p.address);
      // Known but with no ready replica: NOERROR with no address, not NXDOMAIN (a resolver would cache that longer).
      if (!names.has(`${p.org}/${workload}`)) names.set(`${p.org}/${workload}`, []);
    }
    this.table = { orgs, names, outside };
  }

  async close(): Promise<void> {
    const udp = this.udp;
    const tcp = this.tcp;
    this.udp = this.tcp = this.listening = undefined;
    udp?.close();
    if (tcp) await new Promise<void>((resolve) => tcp.close(() => resolve()));
  }

  private serveTcp(socket: Socket): void {
    const source = socket.remoteAddress ?? '';
    let buffered = Buffer.alloc(0);
    socket.setTimeout(TCP_IDLE_MS, () => socket.destroy());
    socket.on('error', () => socket.destroy());
    socket.on('data', (chunk) => {
      buffered = Buffer.concat([buffered, chunk]);
      while (buffered.length >= 2) {
        const length = buffered.readUInt16BE(0);
        if (length > MAX_PACKET) return void socket.destroy();
        if (buffered.length < 2 + length) {
          if (buffered.length > 2 + MAX_PACKET) socket.destroy();
          return;
        }
        const msg = buffered.subarray(2, 2 + length);
        buffered = buffered.subarray(2 + length);
        void this.answer(msg, source, true).then((out) => {
          if (!out || socket.destroyed) return;
          const framed = Buffer.alloc(2 + out.length);
          framed.writeUInt16BE(out.length, 0);
          out.copy(framed, 2);
          socket.write(framed);
        });
      }
    });
  }

  /** The response to one query from `source`, or undefined to drop it. */
  private async answer(msg: Buffer, source: string, tcp: boolean): Promise<Buffer | undefined> {
    try {
      if (msg.length < 12 || msg.length > MAX_PACKET || !this.allowed(source)) return undefined;
      const id = msg.readUInt16BE(0);
      // A response sent to us is never answered (no loops between resolvers).
      if (msg[2] & 0x80) return undefined;
      let query: packet.DecodedPacket;
      try {
        query = packet.decode(msg);
      } catch {
        return reply(id, FORMERR);
      }
      const questions = query.questions ?? [];
      if (questions.length !== 1) return reply(id, FORMERR);
      const question = questions[0];
      const rd = (query.flags ?? 0) & packet.RECURSION_DESIRED;
      const org = this.table.orgs.get(source.replace(/^::ffff:/, ''));
      if (org === undefined) return reply(id, REFUSED, question, rd);
      const name = question.name.toLowerCase().replace(/\.$/, '');
      if (question.class !== 'IN') return reply(id, NOTIMP, question, rd);
      if (name === SUFFIX.slice(1) || name.endsWith(SUFFIX)) {
        const addresses = this.table.names.get(`${org}/${name}`);
        if (!addresses) return reply(id, NXDOMAIN, question, rd, [], true);
        const answers: packet.Answer[] = question.type === 'A' ? addresses.map((data) => ({ type: 'A', name: question.name, ttl: TTL, class: 'IN', data })) : [];
        return trim(reply(id, NOERROR, question, rd, answers, true), tcp, id, question, rd);
      }
      if (!mayLookUp(this.table.outside.get(source.replace(/^::ffff:/, '')), name)) return reply(id, REFUSED, question, rd);
      return trim(await this.forward(source, id, question, rd), tcp, id, question, rd);
    } catch (err) {
      this.onError(err);
      return undefined;
    }
  }

  /** A name outside cpln.local, looked up by the host's resolvers (A and AAAA; other types are not implemented). */
  private async forward(source: string, id: number, question: packet.Question, rd: number): Promise<Buffer> {
    if (question.type !== 'A' && question.type !== 'AAAA') return reply(id, NOTIMP, question, rd);
    const mine = this.forwardsBy.get(source) ?? 0;
    if (this.forwards >= FORWARDS_MAX || mine >= FORWARDS_PER_SOURCE) return reply(id, SERVFAIL, question, rd);
    this.forwards++;
    this.forwardsBy.set(source, mine + 1);
    try {
      const found = question.type === 'A' ? await this.resolver.resolve4(question.name, { ttl: true }) : await this.resolver.resolve6(question.name, { ttl: true });
      const answers: packet.Answer[] = found.map((r) => ({ type: question.type as 'A', name: question.name, ttl: Math.min(r.ttl, 300), class: 'IN', data: r.address }));
      return reply(id, NOERROR, question, rd, answers);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      return reply(id, code === 'ENOTFOUND' ? NXDOMAIN : code === 'ENODATA' ? NOERROR : SERVFAIL, question, rd);
    } finally {
      this.forwards--;
      const left = (this.forwardsBy.get(source) ?? 1) - 1;
      if (left > 0) this.forwardsBy.set(source, left);
      else this.forwardsBy.delete(source);
    }
  }

  /** Whether `source` is still within its rate this second. */
  private allowed(source: string): boolean {
    const second = Math.floor(Date.now() / 1000);
    if (second !== this.rateSecond) {
      this.rateSecond = second;
      this.rate.clear();
    }
    const n = (this.rate.get(source) ?? 0) + 1;
    this.rate.set(source, n);
    return n <= PER_SOURCE_PER_SECOND;
  }
}

/** Whether a replica allowed `outside` may have `name` looked up: a hostname it names, or one under a wildcard's (`*.x`: x and its subdomains). */
function mayLookUp(outside: 'any' | string[] | undefined, name: string): boolean {
  if (outside === 'any') return true;
  return (outside ?? []).some((h) => (h.startsWith('*.') ? name === h.slice(2) || name.endsWith(h.slice(1)) : name === h));
}

function reply(id: number, rcode: number, question?: packet.Question, rd = 0, answers: packet.Answer[] = [], authoritative = false): Buffer {
  const flags = rcode | (rd ? packet.RECURSION_DESIRED : 0) | packet.RECURSION_AVAILABLE | (authoritative ? packet.AUTHORITATIVE_ANSWER : 0);
  return packet.encode({ type: 'response', id, flags, questions: question ? [question] : [], answers });
}

/** A UDP answer past 512 bytes is cut to its header and question, marked truncated: the resolver asks again over TCP. */
function trim(out: Buffer, tcp: boolean, id: number, question: packet.Question, rd: number): Buffer {
  if (tcp || out.length <= 512) return out;
  const flags = (out.readUInt16BE(2) & 0xf) | packet.TRUNCATED_RESPONSE | (rd ? packet.RECURSION_DESIRED : 0) | packet.RECURSION_AVAILABLE;
  return packet.encode({ type: 'response', id, flags, questions: [question], answers: [] });
}
