import type { FastifyRequest } from 'fastify';
import { parseKey, secretMatches } from '../auth/keys.js';
import type { Principal } from '../auth/principal.js';
import { ApiError } from '../errors.js';
import type { Store } from '../store/types.js';

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal;
  }
  interface FastifyContextConfig {
    /** Served without credentials. */
    public?: boolean;
  }
}

/** The token of `Authorization: Bearer <token>` or of a bare `Authorization: <token>`. */
export function tokenOf(request: FastifyRequest): string | undefined {
  const header = request.headers.authorization;
  if (!header) return undefined;
  const match = /^bearer\s+(.+)$/i.exec(header.trim());
  return (match ? match[1] : header).trim() || undefined;
}

/** Resolves a request's credentials to a principal; 401 when absent, malformed, unknown or revoked. */
export async function authenticate(store: Store, request: FastifyRequest): Promise<Principal> {
  const token = tokenOf(request);
  if (!token) throw new ApiError('unauthorized', 'credentials are required: send Authorization: Bearer <token>');
  const parsed = parseKey(token);
  const record = parsed && (await store.findKey(parsed.keyName));
  if (!parsed || !record || record.org !== parsed.org || record.serviceAccount !== parsed.serviceAccount || !secretMatches(parsed.secret, record.secretHash)) {
    throw new ApiError('unauthorized', 'the token is invalid, expired or revoked');
  }
  return { org: record.org, kind: 'serviceaccount', name: record.serviceAccount, link: `/org/${record.org}/serviceaccount/${record.serviceAccount}` };
}
