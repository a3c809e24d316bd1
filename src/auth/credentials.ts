// The credential a request presents, read the same way by the API and the registry.
import type { FastifyRequest } from 'fastify';

/**
 * A browser's WebSocket cannot send an Authorization header, so an upgrade may carry the token as
 * one of its offered subprotocols instead, base64url-encoded after this prefix (as Kubernetes does);
 * the client offers another subprotocol first, which the server picks, so the token is not echoed.
 */
export const TOKEN_PROTOCOL = 'base64url.bearer.authorization.keel.';


/** The token of `Authorization: Bearer <token>`, of a bare `Authorization: <token>`, or of a WebSocket upgrade's token subprotocol. */
export function tokenOf(request: FastifyRequest): string | undefined {
  const header = request.headers.authorization;
  if (!header) return request.headers.upgrade?.toLowerCase() === 'websocket' ? protocolToken(request.headers['sec-websocket-protocol']) : undefined;
  // How every client sends it; the general form below is for the rest.
  if (header.startsWith('Bearer ') && header.charCodeAt(7) > 32 && header.charCodeAt(header.length - 1) > 32) return header.slice(7);
  const match = /^bearer\s+(.+)$/i.exec(header.trim());
  return (match ? match[1] : header).trim() || undefined;
}

function protocolToken(offered: string | undefined): string | undefined {
  const encoded = offered
    ?.split(',')
    .map((p) => p.trim())
    .find((p) => p.startsWith(TOKEN_PROTOCOL))
    ?.slice(TOKEN_PROTOCOL.length);
  return encoded ? Buffer.from(encoded, 'base64url').toString('utf8').trim() || undefined : undefined;
}

/** The credential a request presents: a bearer token, or the password of Basic auth (as registry clients send a key). */
export function credentialOf(request: FastifyRequest): string | undefined {
  const header = request.headers.authorization;
  const basic = header && /^basic\s+(\S+)$/i.exec(header.trim());
  if (!basic) return tokenOf(request);
  const decoded = Buffer.from(basic[1], 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  return colon >= 0 ? decoded.slice(colon + 1) || undefined : undefined;
}
