// The MCP server over streamable HTTP at /mcp, on the Core API port. The route signs its caller in as
// every route does (401 before any MCP exchange without a valid credential); each tool call is then a
// request injected into this same app with the caller's own credential, so it is authenticated again
// (a key revoked mid-session is refused at the next call), admitted, authorized and audited as any
// other request of that caller. Stateless: a POST carries one exchange, nothing is kept between them.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { ApiError } from '../errors.js';
import { createMcpServer, toolsetsIn, TOOLSETS, type Api } from '../mcp/tools.js';

export function mountMcp(app: FastifyInstance): void {
  // Counted against its caller's requests in flight and timed as any request; each tool call is then
  // admitted on its own, and the exchange that carries it holds no seat the call would wait on.
  const options = { config: { seatless: true } };
  // Building a server (its tools' schemas) costs more than a call: servers are kept, by tool set, and
  // lent to one exchange at a time, each time calling as that exchange's caller.
  const idle = new Map<string, Lent[]>();
  app.post('/mcp', options, async (request, reply) => {
    const toolsets = toolsetsOf(request);
    const setKey = toolsets?.join(',') ?? '';
    const lent = idle.get(setKey)?.pop() ?? newLent(toolsets);
    lent.caller.current = apiOf(app, request);
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    reply.hijack();
    reply.raw.on('close', () => {
      void lent.server.close().then(() => {
        lent.caller.current = undefined;
        const pool = idle.get(setKey) ?? [];
        if (pool.length < IDLE_SERVERS) pool.push(lent);
        idle.set(setKey, pool);
      });
    });
    await lent.server.connect(transport);
    await transport.handleRequest(request.raw, reply.raw, request.body);
  });
  // Stateless: no stream to open and no session to end.
  const notHere = async () => {
    throw new ApiError('method_not_allowed', 'the MCP endpoint takes POST only (stateless streamable HTTP)');
  };
  app.get('/mcp', options, notHere);
  app.delete('/mcp', options, notHere);
}

function toolsetsOf(request: FastifyRequest): string[] | undefined {
  const raw = (request.query as { toolsets?: unknown }).toolsets;
  if (raw === undefined) return undefined;
  try {
    return toolsetsIn(String(raw));
  } catch (err) {
    throw ApiError.badRequest((err as Error).message, [{ path: 'toolsets', message: `must be among ${TOOLSETS.join(', ')}` }]);
  }
}

/** Servers kept idle per tool set. */
const IDLE_SERVERS = 16;

interface Lent {
  server: ReturnType<typeof createMcpServer>;
  caller: { current?: Api };
}

function newLent(toolsets: string[] | undefined): Lent {
  const caller: Lent['caller'] = {};
  const current = () => {
    if (!caller.current) throw new Error('an MCP server was used outside the exchange it was lent to');
    return caller.current;
  };
  const api: Api = { request: (method, path, body) => current().request(method, path, body), defaultOrg: () => current().defaultOrg() };
  return { server: createMcpServer(api, { toolsets }), caller };
}

function apiOf(app: FastifyInstance, request: FastifyRequest): Api {
  const authorization = request.headers.authorization!;
  return {
    async request(method, url, body) {
      const res = await app.inject({
        method,
        url,
        headers: { authorization, ...(body !== undefined ? { 'content-type': 'application/json' } : {}), 'x-request-id': request.id },
        payload: body === undefined ? undefined : JSON.stringify(body),
      });
      let parsed: unknown;
      try {
        parsed = res.body ? JSON.parse(res.body) : undefined;
      } catch {
        parsed = { message: res.body };
      }
      return { status: res.statusCode, body: parsed };
    },
    async defaultOrg() {
      return request.principal.org;
    },
  };
}
