import type { FastifyRequest } from 'fastify';
import type { Principal } from '../auth/principal.js';

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal;
  }
  interface FastifyContextConfig {
    /** Served without credentials. */
    public?: boolean;
    /** The 405 answer of a path for the methods it does not have (not an operation). */
    methodNotAllowed?: boolean;
  }
}

/** The token of `Authorization: Bearer <token>` or of a bare `Authorization: <token>`. */
export function tokenOf(request: FastifyRequest): string | undefined {
  const header = request.headers.authorization;
  if (!header) return undefined;
  // How every client sends it; the general form below is for the rest.
  if (header.startsWith('Bearer ') && header.charCodeAt(7) > 32 && header.charCodeAt(header.length - 1) > 32) return header.slice(7);
  const match = /^bearer\s+(.+)$/i.exec(header.trim());
  return (match ? match[1] : header).trim() || undefined;
}
