// `keel mcp`: the MCP server over stdio for a local agent, calling a Keel's REST API as the token it
// is given (--token, then KEEL_TOKEN, then the cpln profile's), at --endpoint or the profile's.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { createMcp, type Api } from './tools.js';

export interface StdioOptions {
  token?: string;
  endpoint?: string;
  profile?: string;
  org?: string;
  toolsets?: string[];
}

interface Profile {
  request?: { endpoint?: string; token?: string };
  context?: { org?: string };
}

/** Where the cpln CLI keeps its profiles (as it finds them: CPLN_HOME, else XDG_CONFIG_HOME/cpln, else ~/.config/cpln). */
function cplnHome(): string {
  return process.env.CPLN_HOME ?? join(process.env.XDG_CONFIG_HOME ?? join(homedir(), '.config'), 'cpln');
}

/** The profile named, else the CLI's default one (its `profiles/default` file, else the only profile). */
export function readProfile(name?: string): Profile | undefined {
  const dir = join(cplnHome(), 'profiles');
  let chosen = name ?? process.env.CPLN_PROFILE;
  if (!chosen && existsSync(join(dir, 'default'))) chosen = readFileSync(join(dir, 'default'), 'utf8').trim();
  if (!chosen && existsSync(dir)) {
    const all = readdirSync(dir).filter((f) => f.endsWith('.json'));
    if (all.length === 1) chosen = all[0].slice(0, -'.json'.length);
  }
  if (!chosen) return undefined;
  const file = join(dir, `${chosen}.json`);
  if (!existsSync(file)) throw new Error(`cpln profile '${chosen}' not found (${file})`);
  return JSON.parse(readFileSync(file, 'utf8')) as Profile;
}

/** The endpoint, token and org a session runs with; an error saying what is missing. */
export function sessionOf(options: StdioOptions): { endpoint: string; token: string; org?: string } {
  const explicit = options.token ?? process.env.KEEL_TOKEN;
  const profile = explicit && options.endpoint && !options.profile ? undefined : readProfile(options.profile);
  const token = explicit ?? profile?.request?.token;
  const endpoint = options.endpoint ?? profile?.request?.endpoint;
  if (!token) throw new Error('no token: give --token, set KEEL_TOKEN, or name a cpln profile that holds one (--profile)');
  if (!endpoint) throw new Error('no endpoint: give --endpoint (e.g. http://127.0.0.1:8080) or name a cpln profile that holds one');
  return { endpoint: endpoint.replace(/\/+$/, ''), token, org: options.org ?? profile?.context?.org };
}

export function httpApi(endpoint: string, token: string, org?: string): Api {
  let known = org;
  let auditBase: string | undefined;
  /** The Audit API is served on its own port: its address is in the discovery document. */
  const baseOf = async (path: string) => {
    if (!path.startsWith('/audit/')) return endpoint;
    if (!auditBase) {
      const res = await fetch(`${endpoint}/discovery`, { signal: AbortSignal.timeout(60_000) });
      const audit = res.ok ? ((await res.json()) as { endpoints?: { audit?: unknown } }).endpoints?.audit : undefined;
      if (typeof audit !== 'string') throw new Error(`${endpoint}/discovery names no Audit API endpoint`);
      auditBase = audit.replace(/\/+$/, '');
    }
    return auditBase;
  };
  const api: Api = {
    async request(method, path, body) {
      const res = await fetch(`${await baseOf(path)}${path}`, {
        method,
        headers: { authorization: `Bearer ${token}`, accept: 'application/json', ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(60_000),
      });
      const text = await res.text();
      let parsed: unknown;
      try {
        parsed = text ? JSON.parse(text) : undefined;
      } catch {
        parsed = { message: text.slice(0, 2000) };
      }
      return { status: res.status, body: parsed };
    },
    async defaultOrg() {
      // Not given: the caller's only org, as the CLI's `login` chooses.
      if (known) return known;
      const orgs = await api.request('GET', '/org');
      const items = (orgs.body as { items?: Array<{ name: string }> } | undefined)?.items ?? [];
      if (orgs.status === 200 && items.length === 1) known = items[0].name;
      return known;
    },
  };
  return api;
}

export async function serveStdio(options: StdioOptions): Promise<void> {
  const { endpoint, token, org } = sessionOf(options);
  const { server } = createMcp(httpApi(endpoint, token, org), { toolsets: options.toolsets });
  await server.connect(new StdioServerTransport());
  await new Promise<void>((resolve) => server.server.onclose = resolve);
}
