// The MCP server over streamable HTTP at /mcp, on the Core API port. The route signs its caller in as
// every route does (401 before any MCP exchange without a valid credential); each tool call is then a
// request injected into this same app with the caller's own credential, so it is authenticated again
// (a key revoked mid-session is refused at the next call), admitted, authorized and audited as any
// other request of that caller. Stateless: a POST carries one exchange, nothing is kept between them.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import {
  ErrorCode,
  isJSONRPCError,
  isJSONRPCRequest,
  isJSONRPCResponse,
  JSONRPCMessageSchema,
  SUPPORTED_PROTOCOL_VERSIONS,
  type JSONRPCMessage,
  type RequestId,
} from '@modelcontextprotocol/sdk/types.js';
import { ApiError } from '../errors.js';
import { createMcpServer, toolsetsIn, TOOLSETS, type Api } from '../mcp/tools.js';

export function mountMcp(app: FastifyInstance): void {
  // Counted against its caller's requests in flight and timed as any request; each tool call is then
  // admitted on its own, and the exchange that carries it holds no seat the call would wait on.
  const options = {
    config: { seatless: true },
    schema: {
      summary: 'The MCP server (streamable HTTP, JSON answers): tools over the API, run as the caller',
      querystring: { type: 'object', properties: { toolsets: { type: 'string', description: `Comma-separated tool sets to offer: ${TOOLSETS.join(', ')}` } } },
    },
  };
  // Building a server (its tools' schemas) costs more than a call: servers are kept, by tool set,
  // each connected once to its own in-process transport, and lent to one exchange at a time, each
  // time calling as that exchange's caller. A POST is answered here as the SDK's stateless transport
  // with JSON responses would answer it, without its per-exchange connect, close and Web-request copy.
  const idle = new Map<string, Lent[]>();
  app.post('/mcp', options, async (request, reply) => {
    const toolsets = toolsetsOf(request);
    const version = request.headers['mcp-protocol-version'];
    if (typeof version === 'string' && !SUPPORTED_PROTOCOL_VERSIONS.includes(version)) {
      return reply.code(400).send(rpcError(ErrorCode.InvalidRequest, `unsupported MCP protocol version '${version}' (supported: ${SUPPORTED_PROTOCOL_VERSIONS.join(', ')})`));
    }
    const accept = request.headers.accept ?? '';
    if (!accept.includes('application/json') && !accept.includes('*/*')) {
      return reply.code(406).send(rpcError(ErrorCode.InvalidRequest, 'the client must accept application/json'));
    }
    const parsed = (Array.isArray(request.body) ? request.body : [request.body]).map((m) => JSONRPCMessageSchema.safeParse(m));
    if (parsed.length === 0 || parsed.some((p) => !p.success)) {
      return reply.code(400).send(rpcError(ErrorCode.ParseError, 'the body is not a JSON-RPC message (or a batch of them)'));
    }
    const messages = parsed.map((p) => p.data!);
    const setKey = toolsets?.join(',') ?? '';
    const lent = idle.get(setKey)?.pop() ?? (await newLent(toolsets));
    lent.caller.current = apiOf(app, request);
    let answers: JSONRPCMessage[];
    try {
      answers = await lent.transport.exchange(messages);
    } finally {
      lent.caller.current = undefined;
      const pool = idle.get(setKey) ?? [];
      if (pool.length < IDLE_SERVERS) pool.push(lent);
      idle.set(setKey, pool);
    }
    // Notifications and responses only: accepted, nothing to answer.
    if (answers.length === 0) return reply.code(202).send();
    return reply.code(200).type('application/json').send(Array.isArray(request.body) ? answers : answers[0]);
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
  transport: Exchanges;
  caller: { current?: Api };
}

async function newLent(toolsets: string[] | undefined): Promise<Lent> {
  const caller: Lent['caller'] = {};
  const current = () => {
    if (!caller.current) throw new Error('an MCP server was used outside the exchange it was lent to');
    return caller.current;
  };
  const api: Api = { request: (method, path, body) => current().request(method, path, body), defaultOrg: () => current().defaultOrg() };
  const transport = new Exchanges();
  await createMcpServer(api, { toolsets }).connect(transport);
  return { transport, caller };
}

/** The SDK's transport interface for one server kept connected: an exchange hands it a POST's
 *  messages and waits for the answer to each request among them. Anything else the server sends
 *  (progress, logs) has no stream to go to in stateless JSON mode, and is dropped as the SDK drops it. */
class Exchanges implements Transport {
  onmessage?: Transport['onmessage'];
  onclose?: () => void;
  onerror?: (error: Error) => void;
  private readonly waiting = new Map<RequestId, (answer: JSONRPCMessage) => void>();

  async start(): Promise<void> {}

  async close(): Promise<void> {
    this.onclose?.();
  }

  async send(message: JSONRPCMessage): Promise<void> {
    if ((isJSONRPCResponse(message) || isJSONRPCError(message)) && message.id !== undefined) {
      const answered = this.waiting.get(message.id);
      this.waiting.delete(message.id);
      answered?.(message);
    }
  }

  exchange(messages: JSONRPCMessage[]): Promise<JSONRPCMessage[]> {
    const answers = messages.filter(isJSONRPCRequest).map((m) => new Promise<JSONRPCMessage>((resolve) => this.waiting.set(m.id, resolve)));
    for (const message of messages) this.onmessage?.(message);
    return Promise.all(answers);
  }
}

function rpcError(code: number, message: string) {
  return { jsonrpc: '2.0', error: { code, message }, id: null };
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
