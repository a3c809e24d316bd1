import { KEEL_ACTOR } from '../../src/audit/events.js';
// A Keel server for tests, on a real store: SQLite in a temp directory or PostgreSQL in a
// fresh schema. Requests go through fastify's inject(), so every hook and handler runs.
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe } from 'node:test';
import { DEFAULTS, type Config } from '../../src/config.js';
import { accountLinkOf, createOrg } from '../../src/resources/orgs.js';
import { buildApp, type App } from '../../src/server/app.js';
import { openStore } from '../../src/store/open.js';
import type { Store } from '../../src/store/types.js';
import { createTestSchema, postgresAvailable } from './postgres.js';

export type Backend = 'sqlite' | 'postgres';
export const BACKENDS: Backend[] = ['sqlite', 'postgres'];

export interface Response {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: any;
  raw: string;
}

export interface TestKeel {
  app: App;
  store: Store;
  org: string;
  token: string;
  config: Config;
  /** A request as the admin (or with `token`); `body` objects are sent as JSON. */
  call(method: string, url: string, body?: unknown, options?: { token?: string | null; headers?: Record<string, string>; rawBody?: string; app?: App }): Promise<Response>;
  /** A second Keel on the same database, as another process would be (`settings` override the first's). */
  reopen(settings?: Partial<Config>): Promise<{ app: App; store: Store }>;
  /** Serves the Core API on a free port of 127.0.0.1 (for real clients and streams), once; gives its base URL. */
  listen(): Promise<string>;
  close(): Promise<void>;
}

export async function storeFor(backend: Backend, readCacheMb?: number, readLeaseMs?: number): Promise<{ store: Store; url?: string; dir: string; cleanup(): Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), 'keel-test-'));
  if (backend === 'sqlite') {
    const store = await openStore({ dataDir: dir });
    return { store, dir, cleanup: async () => rmSync(dir, { recursive: true, force: true }) };
  }
  const schema = await createTestSchema();
  const store = await openStore({ dataDir: dir, databaseUrl: schema.url, readCacheMb, readLeaseMs });
  return {
    store,
    url: schema.url,
    dir,
    cleanup: async () => {
      await schema.drop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * `settings` override the test defaults (which run without reconcilers, so status stays put);
 * with `logStream`, the server logs there at `settings.logLevel` instead of not at all.
 */
export async function startKeel(backend: Backend, org = 'acme', settings: Partial<Config> = {}, logStream?: NodeJS.WritableStream): Promise<TestKeel> {
  const { store, url, dir, cleanup } = await storeFor(backend, settings.readCacheMb, settings.readLeaseMs);
  const config: Config = { ...DEFAULTS, host: '127.0.0.1', port: 0, auditPort: 0, dataDir: dir, databaseUrl: url, org, logLevel: 'silent', ...settings };
  const { token } = await createOrg(store, { name: org, actor: KEEL_ACTOR, superusers: [], accountLink: accountLinkOf(org), adminServiceAccount: 'admin' });
  const app = await buildApp(config, store, logStream ? { logStream } : { logger: false });
  const extra: Array<{ app: App; store: Store }> = [];
  return {
    app,
    store,
    org,
    token: token!,
    config,
    async call(method, url, body, options = {}) {
      const headers: Record<string, string> = { ...(options.headers ?? {}) };
      const tok = options.token === undefined ? token : options.token;
      if (tok !== null) headers.authorization ??= `Bearer ${tok}`;
      let payload: string | undefined = options.rawBody;
      if (body !== undefined) {
        payload = JSON.stringify(body);
        headers['content-type'] ??= 'application/json';
      }
      const res = await (options.app ?? app).core.inject({ method: method as any, url, headers, payload });
      let parsed: unknown = undefined;
      try {
        parsed = res.body ? JSON.parse(res.body) : undefined;
      } catch {
        parsed = undefined;
      }
      return { status: res.statusCode, headers: res.headers as Response['headers'], body: parsed, raw: res.body };
    },
    async reopen(overrides = {}) {
      const second = await openStore({ dataDir: dir, databaseUrl: url, readCacheMb: overrides.readCacheMb ?? config.readCacheMb, readLeaseMs: overrides.readLeaseMs ?? config.readLeaseMs });
      const secondApp = await buildApp({ ...config, ...overrides }, second, { logger: false });
      extra.push({ app: secondApp, store: second });
      return { app: secondApp, store: second };
    },
    async listen() {
      if (!app.core.server.listening) await app.core.listen({ host: '127.0.0.1', port: 0 });
      return `http://127.0.0.1:${(app.core.server.address() as AddressInfo).port}`;
    },
    async close() {
      for (const e of extra) {
        await e.app.core.close();
        await e.app.audit.close();
        await e.store.close();
      }
      await app.core.close();
      await app.audit.close();
      await store.close();
      await cleanup();
    },
  };
}

const postgresUp = await postgresAvailable();

/** Declares the same suite once per backend; PostgreSQL's is skipped (with a notice) when unreachable. */
export function forEachBackend(title: string, suite: (backend: Backend) => void, backends: Backend[] = BACKENDS): void {
  for (const backend of backends) {
    const skip = backend === 'postgres' && !postgresUp ? 'PostgreSQL is not reachable' : false;
    describe(`${title} [${backend}]`, { skip }, () => suite(backend));
  }
}
