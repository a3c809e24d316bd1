// The web console: a single-page app built by `npm run build` (Vite, from console/) into
// dist/console and served here at /console without credentials; it is just another client of the
// public API, so everything it shows comes through the API with the signed-in principal's key.
import { existsSync, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { dirname, extname, join, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Config } from '../config.js';
import { ApiError } from '../errors.js';
import { KINDS } from '../kinds/index.js';
import { sendError } from './errors.js';
import { auditBase, isCoreOrigin } from '../public-url.js';

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json',
  '.map': 'application/json',
  '.woff2': 'font/woff2',
};

/** The built console: dist/console under the package root (the nearest folder up with a package.json). */
export function consoleDir(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json')) && dirname(dir) !== dir) dir = dirname(dir);
  return join(dir, 'dist', 'console');
}

/**
 * What the console's page may load and run: its own scripts and styles (CodeMirror and the page set
 * styles from script, hence 'unsafe-inline' for styles only), and calls to the Core API and the
 * Audit API; no plugin, no frame, no form posted elsewhere, and no page may frame it (clickjacking).
 */
function consolePolicy(config: Config, request: FastifyRequest): string {
  return [
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data:",
    "font-src 'self'",
    `connect-src 'self' ${new URL(auditBase(config, request)).origin}`,
    "manifest-src 'self'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
  ].join('; ');
}

export function mountConsole(app: FastifyInstance, config: Config): void {
  const root = consoleDir();
  const open = { config: { public: true } };
  const notBuilt = () => ApiError.notFound('the console is not built; run npm run build');

  // Every answer of the console's routes (the page, its assets, a missing file's error, a refusal)
  // carries the console's policy: the browser enforces it whichever of them a page or frame loads.
  const withPolicy = (request: FastifyRequest, reply: FastifyReply, payload: unknown, done: (err: Error | null, payload?: unknown) => void) => {
    reply.header('content-security-policy', consolePolicy(config, request)).header('x-frame-options', 'DENY').header('x-content-type-options', 'nosniff');
    done(null, payload);
  };

  // A browser opening the server's root lands in the console; API clients keep the API's 404.
  app.get('/', open, async (request, reply) => {
    if ((request.headers.accept ?? '').includes('text/html')) return reply.redirect('/console/', 302);
    return sendError(reply, request, ApiError.notFound('no such path: GET /'));
  });

  // Which kinds exist and where they live, so the console's navigation follows the registry.
  const kinds = KINDS.map((def) => ({
    kind: def.kind,
    scope: def.scope,
    summary: def.summary,
    operations: { create: def.operations?.create === undefined, update: def.operations?.update === undefined, delete: def.operations?.delete === undefined },
  }));
  app.get('/-kinds', open, async () => ({ kind: 'list', itemKind: 'kind', items: kinds, links: [{ rel: 'self', href: '/-kinds' }] }));

  const page = async (_request: unknown, reply: FastifyReply) => {
    const index = join(root, 'index.html');
    if (!existsSync(index)) throw notBuilt();
    return reply.type(TYPES['.html']).header('cache-control', 'no-cache').send(readFileSync(index));
  };
  // The console's files are not part of the API, so the OpenAPI document leaves them out.
  const file = { ...open, schema: { hide: true }, onSend: withPolicy };
  app.get('/console', file, page); // with or without the trailing slash: asset paths are absolute
  app.get('/console/*', file, async (request, reply) => {
    const rest = (request.params as { '*': string })['*'];
    const path = resolve(root, rest);
    // Names are hashed by the build, so a file under assets/ never changes; anything else is the app's page.
    if (!path.startsWith(root + sep) || !TYPES[extname(path)]) return page(request, reply);
    let body: Buffer;
    try {
      body = await readFile(path);
    } catch {
      return sendError(reply, request, existsSync(root) ? ApiError.notFound(`no such console file: ${rest}`) : notBuilt());
    }
    const immutable = rest.startsWith('assets/');
    return reply
      .type(TYPES[extname(path)])
      .header('cache-control', immutable ? 'public, max-age=31536000, immutable' : 'no-cache')
      .send(body);
  });
}

/**
 * CORS on the Audit API for the Core API's origin only (the console calls the Audit API on its
 * own port): KEEL_PUBLIC_URL's, or a loopback or listen-address host on the Core API's port (see
 * public-url.ts). No wildcard, no other origin, no name a page could rebind to Keel's address.
 */
export function allowCoreOrigin(audit: FastifyInstance, config: Config, corePort: () => number | undefined): void {
  const allowed = (request: FastifyRequest) => isCoreOrigin(config, request, request.headers.origin, corePort());
  audit.addHook('onSend', (request, reply, payload, done) => {
    reply.header('vary', 'Origin');
    if (allowed(request)) reply.header('access-control-allow-origin', request.headers.origin!);
    done(null, payload);
  });
  // Preflight: the console sends its key in Authorization, so the browser asks first.
  audit.route({
    method: 'OPTIONS',
    url: '/*',
    config: { public: true },
    schema: { hide: true }, // a CORS preflight, not an API operation
    handler: async (request, reply) => {
      if (!allowed(request)) return reply.code(204).send();
      return reply
        .code(204)
        .header('access-control-allow-methods', 'GET, POST')
        .header('access-control-allow-headers', 'authorization, content-type')
        .header('access-control-max-age', '600')
        .send();
    },
  });
}
