// Reads made in process by the request that is already being served: an MCP tool call reads through
// the API's own GET routes as the /mcp request's principal, without a second pass through the HTTP
// pipeline (an inject costs more than the read). What that pipeline decides per request is decided
// here the same way: the path and query are checked, the read waits for its seat in the scheduler at
// its route's level, fault rules apply, and the route's own handler authorizes and answers, so each
// refusal is the REST call's (status and error object). What the outer request already did for the
// exchange (authentication, the rate limit, the caps on requests in flight, the timeout, the access
// log) is not done again. Only routes mounted as `inProcess` (the generic kinds' GET routes, whose
// handlers read nothing of the request but its principal, params, query and URL) run here; a path
// that the server routes elsewhere is left to the caller (undefined), which injects it.
import type { FastifyInstance, FastifyReply, FastifyRequest, RouteOptions } from 'fastify';
import FindMyWay from 'find-my-way';
import type { Faults } from '../admin/faults.js';
import { outcomeOf } from '../admin/faults.js';
import { ApiError } from '../errors.js';
import { JsonText, type ApiAnswer } from '../mcp/tools.js';
import { holdsUnstorable, UNSTORABLE_TEXT } from '../storable.js';
import { errorObject } from './errors.js';
import type { Scheduler } from './fairness.js';
import { identityOf } from './limits.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** A GET whose handler may be called in process (see InProcess). */
    inProcess?: boolean;
  }
}

type Handler = (request: FastifyRequest, reply: FastifyReply) => unknown;

/** The server's router options that decide which route a path reaches: given to fastify and to InProcess alike. */
export interface RouterOptions {
  ignoreTrailingSlash: boolean;
  maxParamLength: number;
}

/** A GET route of the server: its handler (bound as fastify binds it) when it runs in process, and its config. */
interface Route {
  handler?: Handler;
  config: RouteOptions['config'];
}

export class InProcess {
  /**
   * A router of fastify's own kind (find-my-way) with the server's options, holding every GET route
   * of the server, so a path reaches here the route it reaches there, with the same parameters and
   * query. Its refusals (a path not validly percent-encoded, a parameter too long) are left unset:
   * such a path finds nothing here and is left to the server, to refuse in its own words.
   */
  private readonly router: FindMyWay.Instance<FindMyWay.HTTPVersion.V1>;

  constructor(
    private readonly scheduler: Scheduler,
    private readonly maxPageSize: number,
    routerOptions: RouterOptions,
    private readonly faults?: Faults,
  ) {
    this.router = FindMyWay(routerOptions);
  }

  /** Told of every route of the server (its onRoute hook; `server`, the instance the route is mounted on). */
  add(route: RouteOptions, server: FastifyInstance): void {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    if (!methods.includes('GET')) return;
    const known: Route = { handler: route.config?.inProcess ? (route.handler as Handler).bind(server) : undefined, config: route.config };
    this.router.on('GET', route.url, { constraints: route.constraints ?? {} }, unrouted, known);
  }

  /**
   * GET `url` as `request`'s principal, answered as the REST call would be (its body as the JSON
   * text a client would receive); undefined when the server routes the path to a route that does
   * not run in process, or refuses it.
   */
  async get(request: FastifyRequest, url: string): Promise<ApiAnswer | undefined> {
    const found = this.router.find('GET', url);
    const route = found?.store as Route | undefined;
    if (!found || !route?.handler) return undefined;
    const handler = route.handler;
    const { params, searchParams: query } = found;
    const reply = new Answer();
    const read = { id: request.id, method: 'GET', url, params, query, body: undefined, principal: request.principal, ip: request.ip, log: request.log, server: { maxPageSize: this.maxPageSize } };
    try {
      const refused = pathOrQueryProblem(params, query);
      if (refused) throw refused;
      const rule = this.faults?.forRequest(read as unknown as FastifyRequest);
      if (rule) {
        request.log.warn({ reqId: request.id, fault: rule.name, method: 'GET', url }, `fault injected: rule '${rule.name}'`);
        const outcome = await outcomeOf(rule);
        // A dropped connection is no answer: the caller sees its call fail, as a client would.
        if (outcome === 'drop') throw new Dropped(`the request was dropped (fault rule '${rule.name}')`);
        if (outcome) throw outcome;
      }
      const run = async () => {
        const returned = await handler(read as unknown as FastifyRequest, reply as unknown as FastifyReply);
        return reply.sent ? reply.payload : returned;
      };
      const level = route.config?.level ?? 'reads';
      const who = identityOf(request.principal, request.ip);
      let payload: unknown;
      if (request.exempt) payload = await run();
      else if (this.scheduler.levels[level].full(who)) throw this.scheduler.levels[level].refusal();
      else payload = await this.scheduler.run(level, who, run);
      // What a REST client would receive: a handler's JSON text as it is, anything else serialized.
      return { status: reply.statusCode, body: payload === undefined ? undefined : new JsonText(typeof payload === 'string' ? payload : JSON.stringify(payload)) };
    } catch (err) {
      if (err instanceof Dropped) throw err;
      if (err instanceof ApiError) return { status: err.status, body: errorObject(err, request.id) };
      request.log.error({ reqId: request.id, err, url }, 'unhandled error');
      const internal = new ApiError('internal', 'internal error; quote the id when reporting it');
      return { status: internal.status, body: errorObject(internal, request.id) };
    }
  }
}

/** The router's handler, never called: a route is found here, and its handler called, by InProcess.get. */
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
