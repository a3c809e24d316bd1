// Calls made in process by the request that is already being served: an MCP tool call reads and
// writes through the API's own routes as the /mcp request's principal, without a second pass through
// the HTTP pipeline (an inject costs more than the call). What that pipeline decides per request is
// decided here the same way and in the same order: the path and query are checked, a write's caller
// must be a member of the org and able to hold a permission the write could need (see BodyPermission),
// a caller whose line at the route's level is full is refused, fault rules apply, a body is checked as
// the body parser checks it (its size, text no store can hold), the call waits for its seat in the
// scheduler at its route's level, and the route's own handler authorizes, validates, audits (under
// the principal) and answers, so each answer and refusal is the REST call's (status and error object).
// What the outer request already did for the exchange (authentication, the rate limit, the caps on
// requests in flight, the timeout, the access log) is not done again. Only routes mounted as
// `inProcess` (the generic kinds' routes, whose handlers read nothing of the request but its method,
// principal, params, query, URL and body) run here; a path that the server routes elsewhere is left
// to the caller (undefined), which injects it.
import type { FastifyContextConfig, FastifyInstance, FastifyReply, FastifyRequest, RouteOptions } from 'fastify';
import FindMyWay from 'find-my-way';
import type { Faults } from '../admin/faults.js';
import { outcomeOf } from '../admin/faults.js';
import { ApiError } from '../errors.js';
import { JsonText, type ApiAnswer } from '../mcp/tools.js';
import { holdsUnstorable, UNSTORABLE_TEXT } from '../storable.js';
import type { Principal } from '../auth/principal.js';
import { errorObject, refusalOf } from './errors.js';
import { levelOf, type Scheduler } from './fairness.js';
import { identityOf } from './limits.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** A route whose handler may be called in process (see InProcess). */
    inProcess?: boolean;
  }
}

type Handler = (request: FastifyRequest, reply: FastifyReply) => unknown;

/** The server's router options that decide which route a path reaches: given to fastify and to InProcess alike. */
export interface RouterOptions {
  ignoreTrailingSlash: boolean;
  maxParamLength: number;
}

/** A route of the server: its handler (bound as fastify binds it) when it runs in process, and its config. */
interface Route {
  handler?: Handler;
  config: RouteOptions['config'];
}

/** The methods a tool calls. */
export type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
const METHODS: Method[] = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'];

export interface InProcessOptions {
  scheduler: Scheduler;
  maxPageSize: number;
  /** The servers' bodyLimit: a larger body is refused as the body parser refuses it. */
  bodyLimit: number;
  /** The check a write's caller passes before its body is read (throws or rejects with the refusal). */
  mayWrite: (principal: Principal, method: string, params: Record<string, string>, config: FastifyContextConfig | undefined) => void | Promise<void>;
  faults?: Faults;
}

export class InProcess {
  /**
   * A router of fastify's own kind (find-my-way) with the server's options, holding every route of
   * the server, so a path reaches here the route it reaches there, with the same parameters and
   * query. Its refusals (a path not validly percent-encoded, a parameter too long) are left unset:
   * such a path finds nothing here and is left to the server, to refuse in its own words.
   */
  private readonly router: FindMyWay.Instance<FindMyWay.HTTPVersion.V1>;

  constructor(
    private readonly options: InProcessOptions,
    routerOptions: RouterOptions,
  ) {
    // Compiled as the server's own router is (generated matchers; a tree changed later is compiled again on its next find).
    this.router = FindMyWay(routerOptions).compile();
  }

  /** Told of every route of the server (its onRoute hook; `server`, the instance the route is mounted on). */
  add(route: RouteOptions, server: FastifyInstance): void {
    const methods = (Array.isArray(route.method) ? route.method : [route.method]).filter((m): m is Method => METHODS.includes(m as Method));
    if (methods.length === 0) return;
    const known: Route = { handler: route.config?.inProcess ? (route.handler as Handler).bind(server) : undefined, config: route.config };
    this.router.on(methods, route.url, { constraints: route.constraints ?? {} }, unrouted, known);
  }

  /**
   * `method` `url` (with `body`) as `request`'s principal, answered as the REST call would be (its
   * body as the JSON text a client would receive); undefined when the server routes the path to a
   * route that does not run in process, or refuses it.
   */
  async call(request: FastifyRequest, method: Method, url: string, body?: unknown): Promise<ApiAnswer | undefined> {
    const found = this.router.find(method, url);
    const route = found?.store as Route | undefined;
    if (!found || !route?.handler) return undefined;
    const handler = route.handler;
    const { params, searchParams: query } = found;
    const reply = new Answer();
    const call = { id: request.id, method, url, params, query, body: undefined as unknown, principal: request.principal, ip: request.ip, log: request.log, server: { maxPageSize: this.options.maxPageSize } };
    try {
      const refused = pathOrQueryProblem(params, query);
      if (refused) throw refused;
      const checked = this.options.mayWrite(request.principal, method, params as Record<string, string>, route.config);
      if (checked) await checked;
      const level = levelOf(method, route.config);
      const who = identityOf(request.principal, request.ip);
      if (!request.exempt && this.options.scheduler.levels[level].full(who)) throw this.options.scheduler.levels[level].refusal();
      const rule = this.options.faults?.forRequest(call as unknown as FastifyRequest);
      if (rule) {
        request.log.warn({ reqId: request.id, fault: rule.name, method, url }, `fault injected: rule '${rule.name}'`);
        const outcome = await outcomeOf(rule);
        // A dropped connection is no answer: the caller sees its call fail, as a client would.
        if (outcome === 'drop') throw new Dropped(`the request was dropped (fault rule '${rule.name}')`);
        if (outcome) throw outcome;
      }
      call.body = this.bodyOf(body);
      const run = async () => {
        const returned = await handler(call as unknown as FastifyRequest, reply as unknown as FastifyReply);
        return reply.sent ? reply.payload : returned;
      };
      const payload = request.exempt ? await run() : await this.options.scheduler.run(level, who, run);
      // What a REST client would receive: a handler's JSON text as it is, anything else serialized.
      return { status: reply.statusCode, body: payload === undefined ? undefined : new JsonText(typeof payload === 'string' ? payload : JSON.stringify(payload)) };
    } catch (err) {
      if (err instanceof Dropped) throw err;
      const refusal = refusalOf(err, request);
      return { status: refusal.status, body: errorObject(refusal, request.id) };
    }
  }

  /**
   * The body as the route would receive it over HTTP: sent as JSON and parsed, so it is refused as the
   * body parser refuses one (larger than bodyLimit, text no store can hold) and holds what JSON holds.
   * The few microseconds of the round trip buy JSON's own rules (undefined left out, toJSON, a
   * cycle refused) rather than a copy that would have to restate them.
   */
  private bodyOf(body: unknown): unknown {
    if (body === undefined) return undefined;
    const text = JSON.stringify(body);
    if (Buffer.byteLength(text) > this.options.bodyLimit) throw new ApiError('payload_too_large', 'the request body is larger than the server accepts');
    const parsed: unknown = JSON.parse(text);
    if (holdsUnstorable(parsed)) throw ApiError.badRequest(`strings must not contain ${UNSTORABLE_TEXT}`);
    return parsed;
  }
}

/** The router's handler, never called: a route is found here, and its handler called, by InProcess.call. */
function unrouted(): void {}

/** A path segment or query value the store could not hold names nothing; a query key given twice is ambiguous (both refused for every request). */
export function pathOrQueryProblem(params: unknown, query: unknown): ApiError | undefined {
  if (holdsUnstorable(params) || holdsUnstorable(query)) return ApiError.badRequest(`the path and query must not contain ${UNSTORABLE_TEXT}`);
  const repeated = repeatedKey(query);
  if (repeated !== undefined) return ApiError.badRequest(`the query parameter ${repeated} is given more than once`, [{ path: repeated, message: 'is given more than once' }]);
  return undefined;
}

/** A query parameter given more than once (parsed as an array), if any. */
function repeatedKey(query: unknown): string | undefined {
  if (!query || typeof query !== 'object') return undefined;
  return Object.keys(query).find((key) => Array.isArray((query as Record<string, unknown>)[key]));
}

/** The reply a handler answers on: its status, and what it sent. */
class Answer {
  statusCode = 200;
  sent = false;
  payload: unknown;
  code(status: number): this {
    this.statusCode = status;
    return this;
  }
  header(): this {
    return this;
  }
  type(): this {
    return this;
  }
  send(payload?: unknown): this {
    this.payload = payload;
    this.sent = true;
    return this;
  }
}

class Dropped extends Error {}
