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
import type { FastifyReply, FastifyRequest, RouteOptions } from 'fastify';
import type { Faults } from '../admin/faults.js';
import { outcomeOf } from '../admin/faults.js';
import { ApiError } from '../errors.js';
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

export interface InProcessAnswer {
  status: number;
  body: unknown;
}

type Handler = (this: unknown, request: FastifyRequest, reply: FastifyReply) => unknown;

/** A node of the GET routes' tree: static segments before a parameter before a wildcard, as the server's router orders them. */
interface Node {
  statics: Map<string, Node>;
  param?: { name: string; node: Node };
  wildcard?: Route;
  route?: Route;
}

interface Route {
  handler?: Handler;
  config: RouteOptions['config'];
}

/** Longest parameter (decoded) the server routes, as its router's maxParamLength. */
const MAX_PARAM_LENGTH = 256;

export class InProcess {
  private readonly root: Node = newNode();

  constructor(
    private readonly scheduler: Scheduler,
    private readonly maxPageSize: number,
    private readonly faults?: Faults,
  ) {}

  /** Told of every route of the server (its onRoute hook): all GET routes are known, so a path finds here the route the server would give it. */
  add(route: RouteOptions): void {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    if (!methods.includes('GET')) return;
    const known: Route = { handler: route.config?.inProcess ? (route.handler as Handler) : undefined, config: route.config };
    let node = this.root;
    for (const segment of segmentsOf(route.url ?? '')) {
      if (segment === '*') {
        node.wildcard = known;
        return;
      }
      if (segment.startsWith(':')) {
        node.param ??= { name: segment.slice(1), node: newNode() };
        node = node.param.node;
      } else {
        let next = node.statics.get(segment);
        if (!next) node.statics.set(segment, (next = newNode()));
        node = next;
      }
    }
    node.route = known;
  }

  /**
   * GET `url` as `request`'s principal, answered as the REST call would be; undefined when the
   * server routes the path to a route that does not run in process.
   */
  async get(request: FastifyRequest, url: string): Promise<InProcessAnswer | undefined> {
    const [path, search] = splitUrl(url);
    // Matched decoded, as the server's router matches; a path it would refuse (not valid
    // percent-encoding, a parameter too long) is left to it, to refuse in its own words.
    let segments: string[];
    try {
      segments = segmentsOf(path).map(decodeURIComponent);
    } catch {
      return undefined;
    }
    const params: Record<string, string> = {};
    const route = find(this.root, segments, 0, params);
    if (!route?.handler) return undefined;
    const handler = route.handler;
    const query: Record<string, string | string[]> = {};
    for (const [key, value] of new URLSearchParams(search)) {
      const had = query[key];
      query[key] = had === undefined ? value : Array.isArray(had) ? [...had, value] : [had, value];
    }
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
        const returned = await handler.call(request.server, read as unknown as FastifyRequest, reply as unknown as FastifyReply);
        return reply.sent ? reply.payload : returned;
      };
      const level = route.config?.level ?? 'reads';
      const who = identityOf(request.principal, request.ip);
      let payload: unknown;
      if (request.exempt) payload = await run();
      else if (this.scheduler.levels[level].full(who)) throw this.scheduler.levels[level].refusal();
      else payload = await this.scheduler.run(level, who, run);
      // What a REST client would parse: a handler's JSON text as it is, anything else as serialized.
      return { status: reply.statusCode, body: typeof payload === 'string' ? JSON.parse(payload) : payload === undefined ? undefined : JSON.parse(JSON.stringify(payload)) };
    } catch (err) {
      if (err instanceof Dropped) throw err;
      if (err instanceof ApiError) return { status: err.status, body: errorObject(err, request.id) };
      request.log.error({ reqId: request.id, err, url }, 'unhandled error');
      const internal = new ApiError('internal', 'internal error; quote the id when reporting it');
      return { status: internal.status, body: errorObject(internal, request.id) };
    }
  }
}

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

function newNode(): Node {
  return { statics: new Map() };
}

function splitUrl(url: string): [string, string] {
  const at = url.indexOf('?');
  return at < 0 ? [url, ''] : [url.slice(0, at), url.slice(at + 1)];
}

/** A path's segments, a trailing slash ignored as the server ignores it. */
function segmentsOf(path: string): string[] {
  const segments = path.split('/').slice(1);
  if (segments.length > 1 && segments[segments.length - 1] === '') segments.pop();
  return segments;
}

/** The route of `segments` from `node`, its parameters set in `params`: a static segment first, then a parameter, then a wildcard. */
function find(node: Node, segments: string[], at: number, params: Record<string, string>): Route | undefined {
  if (at === segments.length) return node.route;
  const segment = segments[at];
  const next = node.statics.get(segment);
  const found = next && find(next, segments, at + 1, params);
  if (found) return found;
  if (node.param && segment !== '' && segment.length <= MAX_PARAM_LENGTH) {
    const route = find(node.param.node, segments, at + 1, params);
    if (route) {
      params[node.param.name] = segment;
      return route;
    }
  }
  if (node.wildcard) {
    params['*'] = segments.slice(at).join('/');
    return node.wildcard;
  }
  return undefined;
}
