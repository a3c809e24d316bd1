import type { FastifyRequest } from 'fastify';
import type { Principal } from '../auth/principal.js';
import type { KindDef } from '../kinds/types.js';

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal;
  }
  interface FastifyContextConfig {
    /** Served without credentials. */
    public?: boolean;
    /** The 405 answer of a path for the methods it does not have (not an operation). */
    methodNotAllowed?: boolean;
    /** A write that needs one of these permissions on its kind (on the item the path parameter `item` names, if any): checked before its body is read. */
    bodyPermission?: BodyPermission;
  }
}

export interface BodyPermission {
  def: KindDef;
  permissions: string[];
  item?: string;
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

/** The credential a request presents: a bearer token, or the password of Basic auth (as registry clients send a key). */
export function credentialOf(request: FastifyRequest): string | undefined {
  const header = request.headers.authorization;
  const basic = header && /^basic\s+(\S+)$/i.exec(header.trim());
  if (!basic) return tokenOf(request);
  const decoded = Buffer.from(basic[1], 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  return colon >= 0 ? decoded.slice(colon + 1) || undefined : undefined;
}
