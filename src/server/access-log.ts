// Request lines. Writing two for every request, as fastify does, costs more than serving a small
// GET (pino writes synchronously), so by default only what an operator acts on is logged: answers
// of 400 and above (of 400 to 499, up to 20 a second per caller), and requests slower than
// slowRequestMs, one line each. Other log lines that concern a request name its reqId, the id the
// error object returns.
import { LogController, type FastifyReply, type FastifyRequest } from 'fastify';
import type { Config } from '../config.js';

/** Characters of a URL a request line keeps: a caller sending 16 KB URLs that are refused must not make each refusal a 16 KB write. */
const LOGGED_URL = 512;
/**
 * Answers of 400 to 499 logged per caller (principal, or address when there is none) each second.
 * A caller that floods the server with refused requests must not turn each refusal into a log write
 * (a flood of thousands a second fills a disk and costs the server more than refusing): past this,
 * its refusals are counted, and one line a second says how many were not logged.
 */
const CLIENT_ERRORS_PER_SECOND = 20;
/** Callers counted in one second; past this, the rest are counted together. */
const COUNTED_CALLERS = 10_000;
const WINDOW_MS = 1000;

interface Counted {
  logged: number;
  notLogged: number;
  principal?: string;
  remoteAddress: string;
}

export class AccessLog extends LogController {
  private readonly all: boolean;
  private readonly off: boolean;
  private readonly slowMs: number;
  /** Refusals logged and not logged this second, by caller. */
  private readonly counted = new Map<string, Counted>();
  private window?: NodeJS.Timeout;

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
    if (!this.all && !slow && reply.statusCode >= 400 && reply.statusCode < 500 && !this.mayLog(request)) return;
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

  /** Whether the caller's refusal may have its line, this second (else it is counted). */
  private mayLog(request: FastifyRequest): boolean {
    const principal = request.principal?.link;
    let key = principal ?? request.ip;
    if (!this.counted.has(key) && this.counted.size >= COUNTED_CALLERS) key = '';
    let counted = this.counted.get(key);
    if (!counted) {
      this.counted.set(key, (counted = { logged: 0, notLogged: 0, ...(key === '' ? { remoteAddress: 'many' } : { principal, remoteAddress: request.ip }) }));
      this.window ??= setTimeout(() => this.endWindow(request.server.log), WINDOW_MS).unref();
    }
    if (counted.logged < CLIENT_ERRORS_PER_SECOND) {
      counted.logged++;
      return true;
    }
    counted.notLogged++;
    return false;
  }

  private endWindow(log: FastifyRequest['server']['log']): void {
    this.window = undefined;
    for (const { notLogged, principal, remoteAddress } of this.counted.values()) {
      if (notLogged > 0) log.info({ principal, remoteAddress, notLogged }, `${notLogged} more answers of 400 to 499 to this caller in the last second were not logged`);
    }
    this.counted.clear();
  }
}
