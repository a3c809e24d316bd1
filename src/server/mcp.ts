// The MCP server over streamable HTTP at /mcp, on the Core API port. The route signs its caller in as
// every route does (401 before any MCP exchange without a valid credential, so a key revoked
// mid-session is refused at the next exchange), and is admitted, counted and timed as any request.
// A tool's calls of the generic routes (reads and writes) then run in process as that principal,
// through the routes' own handlers, each checked, admitted and waiting for its seat as the REST call
// would be (see InProcess); a call of any other route (the admin, logs and Audit API routes, whose
// handlers read more of the request) is a request injected into this same app with the caller's own
// credential, authenticated, admitted, authorized and audited as any other request of that caller.
// Stateless: a POST carries one exchange, nothing is kept between them.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import {
  ErrorCode,
  isJSONRPCRequest,
  JSONRPCMessageSchema,
  SUPPORTED_PROTOCOL_VERSIONS,
  type JSONRPCMessage,
  type RequestId,
} from '@modelcontextprotocol/sdk/types.js';
import { ApiError } from '../errors.js';
import type { InProcess } from './in-process.js';
import { identityOf, type RateLimit } from './limits.js';
import { createMcp, JsonText, resultJson, toolsetsIn, TOOLSETS, type Api, type Mcp } from '../mcp/tools.js';

export function mountMcp(app: FastifyInstance, auditApi: () => FastifyInstance, inProcess: InProcess, rateLimit: RateLimit | undefined): void {
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
    const sent = Array.isArray(request.body) ? request.body : [request.body];
    // A batch's calls run at once: its size is bounded before any of it is read, and each of its
    // messages is charged against the caller's rate limit as a request of its own would be (the POST
    // itself took one).
    if (sent.length > MAX_BATCH_MESSAGES) {
      return reply.code(400).send(rpcError(ErrorCode.InvalidRequest, `Invalid Request: a batch holds at most ${MAX_BATCH_MESSAGES} messages; this one holds ${sent.length}`));
    }
    if (rateLimit && sent.length > 1) {
      if (sent.length > rateLimit.burst) throw new ApiError('rate_limited', `a batch of ${sent.length} messages is more than the rate limit lets one key send at once (rateBurst: ${rateLimit.burst}); send fewer`);
      const refused = rateLimit.refusal(identityOf(request.principal, request.ip), sent.length - 1);
      if (refused) throw refused;
    }
    // A plain tool call is known by its shape; any other message is checked as the SDK checks it.
    const parsed = sent.map((m) => (isToolCall(m) ? { success: true, data: m } : JSONRPCMessageSchema.safeParse(m)));
    if (parsed.length === 0 || parsed.some((p) => !p.success)) {
      return reply.code(400).send(rpcError(ErrorCode.ParseError, 'the body is not a JSON-RPC message (or a batch of them)'));
    }
    const messages = parsed.map((p) => p.data as JSONRPCMessage);
    const setKey = toolsets?.join(',') ?? '';
    const lent = idle.get(setKey)?.pop() ?? (await newLent(toolsets));
    lent.caller.current = apiOf(app, auditApi(), inProcess, request);
    let answers: string[];
    try {
      // A tool call is answered by the tool itself, as the SDK's server would answer it; every other
      // message goes through the SDK's server (whose per-message checks cost more than a call).
      if (messages.length === 1 && isToolCall(messages[0])) answers = [await callAnswer(lent.mcp, messages[0])];
      else {
        const toolCalls = messages.filter(isToolCall);
        const rest = messages.filter((m) => !isToolCall(m));
        answers = [...(await Promise.all(toolCalls.map((m) => callAnswer(lent.mcp, m)))), ...(rest.length ? await lent.transport.exchange(rest) : []).map((m) => JSON.stringify(m))];
      }
    } finally {
      lent.caller.current = undefined;
      const pool = idle.get(setKey) ?? [];
      if (pool.length < IDLE_SERVERS) pool.push(lent);
      idle.set(setKey, pool);
    }
    // Notifications and responses only: accepted, nothing to answer.
    if (answers.length === 0) return reply.code(202).send();
    return reply.code(200).type('application/json').send(Array.isArray(request.body) ? `[${answers.join(',')}]` : answers[0]);
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

/** Messages one POST may carry (a JSON-RPC batch); the SDK's own transport takes up to 100. */
export const MAX_BATCH_MESSAGES = 32;

/** Servers kept idle per tool set. */
const IDLE_SERVERS = 16;

interface Lent {
  mcp: Mcp;
  transport: Exchanges;
  caller: { current?: Api };
}

interface ToolCall {
  jsonrpc: '2.0';
  id: RequestId;
  method: 'tools/call';
  params: { name: string; arguments?: Record<string, unknown>; task?: unknown };
}

const TOOL_CALL_KEYS = new Set(['jsonrpc', 'id', 'method', 'params']);

/**
 * A tools/call request the tools answer themselves: a JSON-RPC request (as the SDK's strict schema
 * takes it) naming a tool, with arguments or none, asking for no task and carrying no `_meta`.
 */
function isToolCall(message: unknown): message is ToolCall {
  if (!isPlainObject(message)) return false;
  const m = message as Partial<ToolCall>;
  if (m.jsonrpc !== '2.0' || m.method !== 'tools/call' || !(typeof m.id === 'string' || Number.isInteger(m.id))) return false;
  if (Object.keys(m).some((key) => !TOOL_CALL_KEYS.has(key))) return false;
  const params = m.params as Record<string, unknown> | undefined;
  if (!isPlainObject(params) || typeof params.name !== 'string' || params.task !== undefined || params._meta !== undefined) return false;
  return params.arguments === undefined || isPlainObject(params.arguments);
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A tool call's JSON-RPC answer, as JSON text (the result's item put in as the API gave it, see resultJson). */
async function callAnswer(mcp: Mcp, call: ToolCall): Promise<string> {
  const result = await mcp.callTool(call.params.name, call.params.arguments);
  return `{"jsonrpc":"2.0","id":${JSON.stringify(call.id)},"result":${resultJson(result)}}`;
}

async function newLent(toolsets: string[] | undefined): Promise<Lent> {
  const caller: Lent['caller'] = {};
  const current = () => {
    if (!caller.current) throw new Error('an MCP server was used outside the exchange it was lent to');
    return caller.current;
  };
  const api: Api = { request: (method, path, body) => current().request(method, path, body), defaultOrg: () => current().defaultOrg() };
  const transport = new Exchanges();
  const mcp = createMcp(api, { toolsets });
  await mcp.server.connect(transport);
  return { mcp, transport, caller };
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
    // What the server sends: its own requests and notifications have a method, answers do not.
    const id = (message as { id?: RequestId }).id;
    if (!('method' in message) && id !== undefined) {
      const answered = this.waiting.get(id);
      this.waiting.delete(id);
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

function apiOf(core: FastifyInstance, audit: FastifyInstance, inProcess: InProcess, request: FastifyRequest): Api {
  const authorization = request.headers.authorization!;
  return {
    async request(method, url, body) {
      if (!url.startsWith('/audit/')) {
        const answer = await inProcess.call(request, method, url, body);
        if (answer) return answer;
      }
      // The Audit API's paths (`/audit/…`) are served by its own server, as over its own port.
      const res = await (url.startsWith('/audit/') ? audit : core).inject({
        method,
        url,
        headers: { authorization, ...(body !== undefined ? { 'content-type': 'application/json' } : {}), 'x-request-id': request.id },
        payload: body === undefined ? undefined : JSON.stringify(body),
      });
      if (!res.body) return { status: res.statusCode, body: undefined };
      // The API's JSON is passed on as text (see JsonText); anything else becomes a message.
      if (String(res.headers['content-type']).startsWith('application/json')) return { status: res.statusCode, body: new JsonText(res.body) };
      return { status: res.statusCode, body: { message: res.body } };
    },
    async defaultOrg() {
      return request.principal.org;
    },
  };
}
