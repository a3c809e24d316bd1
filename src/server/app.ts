import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
// First, before any data is read: the request path's object shapes (see shapes.ts).
import './shapes.js';
import { randomInt, randomUUID } from 'node:crypto';
import { PolicyAuthorizer } from '../auth/policies.js';
import { requiredPermission } from '../auth/permissions.js';
import { selfLink } from '../resources/links.js';
import { DEFAULTS, type Config } from '../config.js';
import { ApiError } from '../errors.js';
import { holdsUnstorable, UNSTORABLE_TEXT } from '../storable.js';
import { accountLinkOf } from '../resources/orgs.js';
import { Resources } from '../resources/service.js';
import type { Store } from '../store/types.js';
import { KeyAuthenticator } from '../auth/authenticator.js';
import { BearerAuthenticator } from '../auth/bearer.js';
import { JwtVerifier } from '../auth/jwt.js';
import { UserTokens } from '../auth/user-tokens.js';
import { credentialOf, tokenOf } from '../auth/credentials.js';
import type { Principal } from '../auth/principal.js';
import type { BodyPermission } from './authenticate.js';
import { installErrorHandling, sendError } from './errors.js';
import { mountMeta } from './meta.js';
import { installDocs } from './docs.js';
import { installPaging } from './paging.js';
import { AuthFailures } from '../auth/failures.js';
import { awaitsBody, connectionOptions, installAdmission, installPrincipalAdmission, installRateLimit, rateLimitOf } from './limits.js';
import { installFairness, schedulerOf } from './fairness.js';
import { mountRoutes } from './routes.js';
import { mountAccessRoutes } from './access-routes.js';
import { invitationLink, mountSignIn } from './sign-in.js';
import { Directory } from '../auth/directory.js';
import { Upstream } from '../auth/upstream.js';
import { coreBase } from '../public-url.js';
import { mountClientRoutes } from './client-routes.js';
import { mountAuditApi } from './audit-api.js';
import { mountWatch } from './watch.js';
import { allowCoreOrigin, mountConsole } from './console.js';
import type { AddressInfo } from 'node:net';
import { mountLogs } from './logs-api.js';
import { installLiving, registryHostsOf } from '../reconcile/index.js';
import { Faults, installFaults } from '../admin/faults.js';
import { mountAdmin } from '../admin/routes.js';
import { Sandboxes } from '../admin/sandboxes.js';
import { onReplaced } from '../store/snapshots.js';
import { collectGarbage } from '../registry/gc.js';
import { mountRegistry } from '../registry/routes.js';
import { closeRegistry, openRegistry } from '../registry/storage.js';
import { AccessLog } from './access-log.js';
import { mountMcp } from './mcp.js';
import { InProcess, pathOrQueryProblem, type RouterOptions } from './in-process.js';

export interface App {
  core: FastifyInstance;
  /** The Audit API, served on its own port. */
  audit: FastifyInstance;
  resources: Resources;
}

/**
 * The Core API and the Audit API: JSON in and out, the same authentication hook and error
 * object on both, every kind's routes mounted from the registry.
 */
export interface AppOptions {
  logger?: boolean;
  /** Where log lines go (default stdout). */
  logStream?: NodeJS.WritableStream;
  /** Told of every route as it is mounted on either API (introspection). */
  onRoute?: (route: { method: string | string[]; url: string; config?: unknown; schema?: unknown }, api: 'core' | 'audit') => void;
}

export async function buildApp(config: Config, store: Store, options: AppOptions = {}): Promise<App> {
  const auth = new PolicyAuthorizer(store, config.org);
  const keys = new KeyAuthenticator(store);
  const userTokens = new UserTokens(store, config.userTokenTtlMs ?? DEFAULTS.userTokenTtlMs);
  const bearer = new BearerAuthenticator(keys, new JwtVerifier(config.jwtIssuers ?? []), userTokens);
  const resources = new Resources(
    store,
    auth,
    (org) => {
      auth.invalidate(org);
      keys.invalidate(org);
    },
    {
      audit: config.audit,
      queryBudgetMs: config.queryBudgetMs,
      orgCreation: { creators: config.orgCreators, firstOrg: config.org, maxPerPrincipal: config.maxOrgsPerPrincipal },
      accountLink: accountLinkOf(config.org),
      // Asked only by requests, which the Core API's server (built below) is there to serve.
      registryHosts: () => registryHostsOf(core, config),
    },
  );
  const failures = new AuthFailures(config.authFailureLimit);
  // Credentials presented to public routes that do not sign in: counted apart, so the routes' own
  // counting (the registry's) stays exact; past the limit, such a caller is taken by its address unchecked.
  const misses = new AuthFailures(config.authFailureLimit);
  // One scheduler for both APIs and the watch: the seats are this process's.
  const scheduler = schedulerOf(config);
  const exempt = (principal: Principal) => auth.inGroup(principal, config.org, 'superusers');
  // A restore or reset replaced what these remember (in this process or, on PostgreSQL, another).
  const stopForgetting = onReplaced(store, () => {
    auth.invalidateAll();
    keys.invalidateAll();
  });
  // On a shared database, each request waits for a catch-up sent after it arrived, which first
  // forgets what other processes' changes made stale (AccessFeed).
  const feed = store.accessFeed;
  const stopHearing = feed?.onAccess((org) => {
    if (org === undefined) {
      auth.invalidateAll();
      keys.invalidateAll();
    } else {
      auth.invalidate(org);
      keys.invalidate(org);
    }
  });
  // Only with KEEL_FAULTS=on does fault injection exist at all (its hook runs on every request).
  const faults = config.faults ? (config.faultsFile ? Faults.fromFile(config.faultsFile) : new Faults()) : undefined;
  /** Nothing, or a 403 naming the permission, as the write itself would answer (see BodyPermission). */
  const holdsBodyPermission = (principal: Principal, params: Record<string, string>, needed: BodyPermission | undefined): void | Promise<void> => {
    if (!needed) return;
    const { def, permissions } = needed;
    const target = { org: params.org, gvc: def.scope === 'gvc' ? params.gvc : undefined, name: needed.item === undefined ? undefined : params[needed.item] };
    const decide = (may: boolean) => {
      if (may) return;
      const link = target.name === undefined ? def.kind : selfLink(def.kind, def.scope, target.org, target.gvc ?? '', target.name);
      throw ApiError.forbidden(`not granted [${permissions.map((p) => requiredPermission(def, p)).join(' or ')}] on ${link}`);
    };
    const may = auth.mayHold(principal, permissions, def, target);
    return may instanceof Promise ? may.then(decide) : decide(may);
  };
  /**
   * Whether a caller may send a write's body at all: a member of the org in the path, holding a
   * permission the write could need. Throws (or rejects with) the refusal; synchronous when both
   * answers are at hand.
   */
  const mayWrite = (principal: Principal, params: Record<string, string>, needed: BodyPermission | undefined): void | Promise<void> => {
    if (params.org === undefined) return;
    const member = auth.requireMember(principal, params.org);
    return member ? member.then(() => holdsBodyPermission(principal, params, needed)) : holdsBodyPermission(principal, params, needed);
  };
  const inProcess = new InProcess({ scheduler, maxPageSize: config.maxPageSize, bodyLimit: config.bodyLimit, mayWrite: (principal, method, params, routeConfig) => (BODY_METHODS.has(method) ? mayWrite(principal, params, routeConfig?.bodyPermission) : undefined), faults }, ROUTER_OPTIONS);
  // Each API's own buckets; the Core API's also charge each message of an MCP batch.
  const rateLimits = { core: rateLimitOf(config), audit: rateLimitOf(config) };
  const newServer = async (api: 'core' | 'audit', docs: { title: string; description: string; page: boolean }) => {
    const app = Fastify({
      bodyLimit: config.bodyLimit,
      genReqId: requestIds(),
      requestIdHeader: false,
      logger: options.logger === false ? false : { level: config.logLevel, redact: ['req.headers.authorization', 'req.headers["sec-websocket-protocol"]'], ...(options.logStream ? { stream: options.logStream } : {}) },
      // compile: find-my-way matches with generated code rather than a walk of its tree (the same matches, fewer steps on every request).
      routerOptions: { ...ROUTER_OPTIONS, compile: true },
      // Starting may remove all that a killed Keel left (replicas, mounts, cgroups) before serving,
      // which takes as long as there is to remove: no fixed 10 s bound fails that start.
      pluginTimeout: 0,
      ...connectionOptions(config),
      // Fastify's two lines per request are replaced by AccessLog's; a child logger per request
      // costs more than some requests, so requests share the server's logger (their lines name reqId).
      logController: new AccessLog(config),
      childLoggerFactory: (logger) => logger,
      // The router's own refusals (a path segment that is not valid percent-encoding, or longer than
      // maxParamLength) leave as the API's error object too, not fastify's default body or a 414.
      frameworkErrors: (error, request, reply) =>
        sendError(reply, request, ApiError.badRequest(error.code === 'FST_ERR_MAX_PARAM_LENGTH' ? `a path segment is longer than ${ROUTER_OPTIONS.maxParamLength} characters` : 'the path is not valid percent-encoded UTF-8')),
    });
    if (options.onRoute) app.addHook('onRoute', (route) => options.onRoute!(route, api));
    // The MCP tools' reads run in process, on the routes this server would route them to.
    if (api === 'core') {
      app.addHook('onRoute', function (route) {
        inProcess.add(route, this);
      });
    }
    // Declared up front, so every request object has the same shape from its start (a property added
    // per request would make each one grow and change shape on the hot path).
    app.decorateRequest('principal');
    // Once closing, answers end their connection: a keep-alive socket left idle after the last
    // in-flight request would hold close() (and a graceful shutdown) open.
    let closing = false;
    app.addHook('preClose', async () => void (closing = true));
    app.addHook('onSend', (request, reply, payload, done) => {
      // An answer given before the body has all arrived (a refusal) also ends the connection: the
      // rest of the body would otherwise keep it, and the client, waiting. (A request without a body
      // may be answered before Node has marked it complete: nothing more of it is to come.)
      if (closing || awaitsBody(request)) reply.header('connection', 'close');
      done(null, payload);
    });
    await installDocs(app, docs);
    installErrorHandling(app);
    installBodyParsing(app);
    installPaging(app, config.maxPageSize);
    // A NUL or an unpaired surrogate in a path segment or query value (`/group/%00`) names nothing; PostgreSQL cannot even compare it (a 500).
    // `?dryRun=true&dryRun=false` would otherwise be read as whatever a handler makes of an array.
    // Answered here rather than thrown: the docs routes (registered before) keep fastify's own error handler.
    app.addHook('onRequest', (request, reply, done) => {
      // Only a percent-escape puts a NUL or a lone surrogate in a path (the HTTP parser refuses raw
      // control characters), and only a query can repeat a parameter: most URLs have neither.
      const url = request.url;
      if (url.indexOf('%') === -1 && url.indexOf('?') === -1) return done();
      const refused = pathOrQueryProblem(request.params, request.query);
      if (refused) return sendError(reply, request, refused);
      done();
    });
    installAdmission(app, config); // also sets request.routeConfig, which the hooks after it read
    // --- authentication: a service-account key or a trusted JWT; the handler runs as the principal.
    // Callback style with a synchronous path for a recently verified key: no promise per request.
    const authenticate = (request: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void, mark: number | undefined) => {
      const signIn = (principal: Principal) => {
        // Spelled out rather than spread: one object of one shape per request, whichever kind signed in.
        request.principal = { org: principal.org, kind: principal.kind, name: principal.name, link: principal.link, claims: principal.claims, requestId: request.id, remoteIp: request.ip, mark };
        done();
      };
      // A public route takes no credential, but one presented (a registry client's key) makes the
      // request its principal's for admission rather than its address's. A wrong one is not refused
      // here: the route decides, and the registry counts the failure; misses are bounded apart.
      if (request.routeConfig?.public) {
        const credential = credentialOf(request);
        const recent = credential && keys.recent(credential);
        if (recent) return signIn(recent);
        if (!credential || misses.refusal(request.ip, credential)) return done();
        bearer.authenticate(credential, undefined, mark).then(signIn, (err) => {
          if (err instanceof ApiError && err.code === 'unauthorized') misses.failed(request.ip, credential, err);
          done();
        });
        return;
      }
      const token = tokenOf(request);
      const known = token && keys.recent(token);
      if (known) return signIn(known);
      const refused = failures.refusal(request.ip, token);
      if (refused) return sendError(reply, request, refused);
      bearer.authenticate(token, (request.params as { org?: string }).org, mark).then(signIn, (err) => {
        const tooMany = err instanceof ApiError && err.code === 'unauthorized' ? failures.failed(request.ip, token, err) : undefined;
        if (tooMany) return sendError(reply, request, tooMany);
        done(err);
      });
    };
    app.addHook('onRequest', (request, reply, done) => {
      if (!feed || !(request.routeConfig?.public ? credentialOf(request) : tokenOf(request))) return authenticate(request, reply, done, undefined);
      // Whatever it fails on (a cut connection), the listeners were told to forget every org: the decisions below read the database.
      const mark = feed.mark();
      void Promise.resolve(feed.caughtUp()).then(() => authenticate(request, reply, done, mark));
    });
    // --- end authentication
    installRateLimit(app, rateLimits[api]);
    // What can be decided before the body is read is decided first: a caller that is no member of
    // the org in the path, or that holds no permission the write could need, is refused before it
    // can hold a slot while sending its body.
    app.addHook('onRequest', (request, _reply, done) => {
      if (!request.principal || !BODY_METHODS.has(request.method)) return done();
      let checked: void | Promise<void>;
      try {
        checked = mayWrite(request.principal, request.params as Record<string, string>, request.routeConfig?.bodyPermission);
      } catch (err) {
        return done(err as Error);
      }
      if (checked) checked.then(() => done(), done);
      else done();
    });
    installPrincipalAdmission(app, config, exempt);
    installFairness(app, scheduler);
    if (faults && api === 'core') installFaults(app, faults);
    mountMeta(app, config, store);
    return app;
  };

  const core = await newServer('core', { title: 'Keel Core API', description: 'Organizations and the resources inside them (wire-compatible with the Control Plane Core API).', page: true });
  mountRoutes(core, resources);
  mountWatch(core, store, auth, config, scheduler);
  const registry = openRegistry(config);
  installLiving(core, store, auth, config, registry.blobs, faults?.scenario);
  const directory = new Directory(store);
  const upstream = config.oidcIssuer ? new Upstream({ issuer: config.oidcIssuer, clientId: config.oidcClientId!, clientSecret: config.oidcClientSecret! }) : undefined;
  mountAccessRoutes(core, resources, store, auth, async (request, email, org) => invitationLink(coreBase(config, request), await directory.invite(email, org)));
  mountSignIn(core, { config: { ...DEFAULTS, ...config }, store, tokens: userTokens, directory, upstream });
  mountLogs(core, store, auth, config);
  const sandboxes = config.allowSandboxes
    ? new Sandboxes(store, config, (org) => {
        auth.invalidate(org);
        keys.invalidate(org);
      }, (err, message) => core.log.warn({ err }, message))
    : undefined;
  if (sandboxes) {
    await sandboxes.scan();
    core.addHook('onClose', async () => sandboxes.close());
  }
  mountAdmin(core, { config, store, faults, sandboxes });
  // The Audit API's server is built below; the MCP tools reach it when called.
  mountMcp(core, () => audit, inProcess, rateLimits.core);
  if (faults) faults.log = (entry, message) => core.log.warn(entry, message);
  core.addHook('onClose', async () => {
    stopForgetting();
    stopHearing?.();
  });
  mountClientRoutes(core, resources, store, config, { bearer, auth, failures });
  mountRegistry(core, { config, store, resources, auth, bearer, ...registry, failures });
  const collector = setInterval(() => void collectGarbage(store, registry).catch((err) => core.log.warn({ err }, 'registry garbage collection failed')), REGISTRY_GC_EVERY_MS);
  collector.unref();
  core.addHook('onClose', async () => {
    clearInterval(collector);
    await closeRegistry(registry);
  });
  const audit = await newServer('audit', { title: 'Keel Audit API', description: 'Audit events of every change, and custom events in audit contexts.', page: false });
  mountAuditApi(audit, store, auth);
  mountConsole(core, config);
  allowCoreOrigin(audit, config, () => (core.server.address() as AddressInfo | null)?.port);
  await Promise.all([core.ready(), audit.ready()]);
  return { core, audit, resources };
}

/**
 * JSON bodies are parsed safely (prototype-poisoning keys rejected); an empty body is "no body".
 * The CLI sends an empty form-encoded body for a query without terms, so that is accepted too.
 */
function installBodyParsing(app: FastifyInstance): void {
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser(['application/json', 'text/plain']);
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    if (body === '') return done(null, undefined);
    // Only an escape can put a NUL or a lone surrogate into a parsed body (JSON text holds neither raw).
    if (/\\u(?:0000|[dD][89a-fA-F])/.test(String(body))) {
      return parseJson(request, String(body), (err: Error | null, value?: unknown) =>
        err ? done(err) : holdsUnstorable(value) ? done(ApiError.badRequest(`strings must not contain ${UNSTORABLE_TEXT}`)) : done(null, value),
      );
    }
    parseJson(request, String(body), done);
  });
  app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (_request, body, done) => {
    if ((body as string).trim() === '') return done(null, undefined);
    done(new ApiError('unsupported_media_type', 'the request body must be JSON (Content-Type: application/json)'));
  });
}

/**
 * Request ids, shaped as UUIDs: a random prefix per server, then a count, so each request's id is
 * unique (for 2^32 requests) without drawing randomness for it (an id names a request in answers and
 * logs; it guards nothing).
 */
function requestIds(): () => string {
  const prefix = randomUUID().slice(0, 28);
  let count = randomInt(2 ** 32);
  return () => {
    count = (count + 1) >>> 0;
    return prefix + HEX[count >>> 24] + HEX[(count >>> 16) & 255] + HEX[(count >>> 8) & 255] + HEX[count & 255];
  };
}
const HEX = Array.from({ length: 256 }, (_, byte) => byte.toString(16).padStart(2, '0'));

const BODY_METHODS = new Set(['POST', 'PUT', 'PATCH']);

/** How the APIs' routers match a path (and the MCP tools' in-process reads, which must match as they do). */
const ROUTER_OPTIONS: RouterOptions = { ignoreTrailingSlash: true, maxParamLength: 256 };

/** Unreferenced registry content is collected this often (and by `keel registry gc`). */
const REGISTRY_GC_EVERY_MS = 60 * 60 * 1000;
