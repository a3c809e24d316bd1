// Request lines. Writing two for every request, as fastify does, costs more than serving a small
// GET (pino writes synchronously), so by default only what an operator acts on is logged: answers
// of 400 and above, and requests slower than slowRequestMs, one line each. Other log lines that
// concern a request name its reqId, the id the error object returns.
import { LogController, type FastifyReply, type FastifyRequest } from 'fastify';
import type { Config } from '../config.js';

/** Characters of a URL a request line keeps: a caller sending 16 KB URLs that are refused must not make each refusal a 16 KB write. */
const LOGGED_URL = 512;

export class AccessLog extends LogController {
  private readonly all: boolean;
  private readonly off: boolean;
  private readonly slowMs: number;

  constructor(config: Pick<Config, 'accessLog' | 'slowRequestMs'>) {
    super();
    this.all = config.accessLog === 'all';
    this.off = config.accessLog === 'off';
    this.slowMs = config.slowRequestMs;
  }

  override incomingRequest(): void {}

  override requestCompleted(error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply): void {
    if (this.off) return;
    // A watch stream or logs tail lasts as long as its client wants: its length is not slowness.
    const slow = reply.elapsedTime >= this.slowMs && !request.routeOptions.config?.streaming;
    if (!this.all && !error && reply.statusCode < 400 && !slow) return;
    request.log[error ? 'error' : 'info'](
      {
        reqId: request.id,
        method: request.method,
        url: request.url.length > LOGGED_URL ? `${request.url.slice(0, LOGGED_URL)}… (${request.url.length} characters)` : request.url,
        statusCode: reply.statusCode,
        responseTimeMs: Math.round(reply.elapsedTime * 10) / 10,
        principal: request.principal?.link,
        remoteAddress: request.ip,
        ...(error ? { err: error } : {}),
      },
      'request',
    );
  }
}
