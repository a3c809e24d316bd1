// The ingress's table of domains: which workload a request for a domain's host name goes to, by
// the domain's spec (ports[].routes[], or its workloadLink or gvcLink). The domain reconciler
// hands each domain's spec here as it passes over it (on every change, from this process or
// another, and on its periodic scan), so a request is matched in memory, never against the store.
// See docs/runtime.md, "Domain routing".
import { parseLink } from '../resources/links.js';

/** Where a request for a domain goes: a workload of the domain's org, and what to change on the way. */
export interface DomainTarget {
  org: string;
  gvc: string;
  workload: string;
  /** The workload's port the route names; absent: the workload's first port. */
  port?: number;
  /** The path (and query) the replica is sent. */
  path: string;
  /** Request headers the route sets. */
  headers: Record<string, string>;
  /** The index of the stateful workload's replica the route sends to. */
  replica?: number;
  /** What the request's error says the domain is. */
  domain: string;
}

export type DomainMatch = DomainTarget | { status: number; message: string } | undefined;

interface Route {
  prefix: string;
  replacePrefix?: string;
  hostPrefix?: string;
  /** The workload, or why the route cannot be served. */
  target: { gvc: string; workload: string } | { refused: string };
  port?: number;
  headers: Record<string, string>;
  replica?: number;
}

interface Entry {
  org: string;
  name: string;
  created: string;
  acceptAllSubdomains: boolean;
  /** Longest prefix first; of equal prefixes, one with a hostPrefix first. */
  routes: Route[];
  /** A gvcLink domain: `WORKLOAD.DOMAIN` reaches that workload of the GVC. */
  gvc?: string;
}

/**
 * Headers a route may not set: they frame the request or the connection (a route's value would
 * make the ingress send a request the replica reads differently), or carry what the ingress
 * itself vouches for (the client's address, the host and scheme it used).
 */
const RESERVED = new Set(['content-length', 'transfer-encoding', 'connection', 'upgrade', 'te', 'trailer', 'keep-alive', 'proxy-connection', 'x-forwarded-for', 'x-forwarded-host', 'x-forwarded-proto']);
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;

export class DomainRoutes {
  /** By domain name, then by org: the same name may be created in several orgs. */
  private readonly byName = new Map<string, Map<string, Entry>>();

  /** Takes a domain's spec (undefined: the domain is gone). */
  set(org: string, name: string, spec: Record<string, unknown> | undefined, created = ''): void {
    const key = name.toLowerCase();
    const orgs = this.byName.get(key);
    if (!spec) {
      orgs?.delete(org);
      if (orgs?.size === 0) this.byName.delete(key);
      return;
    }
    const entry = compile(org, key, spec, created);
    if (orgs) orgs.set(org, entry);
    else this.byName.set(key, new Map([[org, entry]]));
  }

  /** Every domain in the table, by org and name. */
  names(): Array<{ org: string; name: string }> {
    return [...this.byName.values()].flatMap((orgs) => [...orgs.values()].map((e) => ({ org: e.org, name: e.name })));
  }

  /** The target of a request for `hostname` (no port) and `url`, why it has none, or undefined: no domain has that name. */
  match(hostname: string, url: string): DomainMatch {
    const host = hostname.toLowerCase().replace(/\.$/, '');
    // Workload endpoints are `WORKLOAD-GVCALIAS.localhost`: no domain, of whatever org, stands in their place.
    if (host === 'localhost' || host.endsWith('.localhost')) return undefined;
    // No DNS name is longer; a longer Host would only cost a lookup per dot.
    if (host.length > 253) return undefined;
    const exact = this.owner(host);
    if (exact) return this.route(exact, host, url);
    // A subdomain: of a domain that accepts all subdomains, or `WORKLOAD.DOMAIN` of a gvcLink domain.
    for (let dot = host.indexOf('.'); dot >= 0; dot = host.indexOf('.', dot + 1)) {
      const entry = this.owner(host.slice(dot + 1));
      if (!entry) continue;
      if (entry.gvc && dot === host.indexOf('.')) {
        const workload = host.slice(0, dot);
        return { org: entry.org, gvc: entry.gvc, workload, path: url, headers: {}, domain: entry.name };
      }
      if (entry.acceptAllSubdomains) return this.route(entry, host, url);
      return { status: 404, message: `domain '${entry.name}' does not accept subdomains such as '${host}' (spec.acceptAllSubdomains is not set)` };
    }
    return undefined;
  }

  /** Of the orgs holding a domain by this name, the one that created it first. */
  private owner(name: string): Entry | undefined {
    const orgs = this.byName.get(name);
    if (!orgs) return undefined;
    let first: Entry | undefined;
    for (const e of orgs.values()) if (!first || e.created < first.created) first = e;
    return first;
  }

  private route(entry: Entry, host: string, url: string): DomainMatch {
    const path = url.split('?')[0];
    const route = entry.routes.find((r) => path.startsWith(r.prefix) && (r.hostPrefix === undefined || host.startsWith(r.hostPrefix)));
    if (!route) return { status: 404, message: `domain '${entry.name}' has no route for path ${path}` };
    if ('refused' in route.target) return { status: 404, message: `domain '${entry.name}': ${route.target.refused}` };
    let rest = url;
    if (route.replacePrefix !== undefined) {
      rest = route.replacePrefix + url.slice(route.prefix.length);
      if (!rest.startsWith('/')) rest = `/${rest}`;
    }
    return { org: entry.org, gvc: route.target.gvc, workload: route.target.workload, port: route.port, path: rest, headers: route.headers, replica: route.replica, domain: entry.name };
  }
}

function compile(org: string, name: string, spec: Record<string, any>, created: string): Entry {
  const target = (link: unknown): Route['target'] => {
    const parsed = typeof link === 'string' ? parseLink(link) : undefined;
    if (!parsed || parsed.kind !== 'workload' || !parsed.gvc) return { refused: `its workloadLink ${JSON.stringify(link)} names no workload` };
    if (parsed.org !== org) return { refused: `its route to ${link} leaves org '${org}': a domain routes only to workloads of its own org` };
    return { gvc: parsed.gvc, workload: parsed.name };
  };
  const routes: Route[] = [];
  for (const port of (Array.isArray(spec.ports) ? spec.ports : []) as Array<{ routes?: unknown }>) {
    for (const r of (Array.isArray(port?.routes) ? port.routes : []) as Array<Record<string, any>>) {
      // A regex route is not served here (see docs/runtime.md): only prefixes are matched.
      if (typeof r.prefix !== 'string' && typeof r.regex === 'string') continue;
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries((r.headers?.request?.set ?? {}) as Record<string, unknown>)) {
        if (typeof v === 'string' && TOKEN.test(k) && FIELD_VALUE.test(v) && !RESERVED.has(k.toLowerCase())) headers[k.toLowerCase()] = v;
      }
      routes.push({
        prefix: typeof r.prefix === 'string' ? r.prefix : '/',
        replacePrefix: typeof r.replacePrefix === 'string' ? r.replacePrefix : undefined,
        hostPrefix: typeof r.hostPrefix === 'string' && r.hostPrefix !== '' ? r.hostPrefix.toLowerCase() : undefined,
        target: target(r.workloadLink),
        port: typeof r.port === 'number' ? r.port : undefined,
        headers,
        replica: typeof r.replica === 'number' ? r.replica : undefined,
      });
    }
  }
  // A domain of one workload (spec.workloadLink, no routes) sends every path to it.
  if (routes.length === 0 && typeof spec.workloadLink === 'string') routes.push({ prefix: '/', target: target(spec.workloadLink), headers: {} });
  routes.sort((a, b) => b.prefix.length - a.prefix.length || Number(b.hostPrefix !== undefined) - Number(a.hostPrefix !== undefined));
  const gvc = typeof spec.gvcLink === 'string' ? parseLink(spec.gvcLink) : undefined;
  return {
    org,
    name,
    created,
    acceptAllSubdomains: spec.acceptAllSubdomains === true,
    routes,
    gvc: gvc && gvc.kind === 'gvc' && gvc.org === org && routes.length === 0 ? gvc.name : undefined,
  };
}
