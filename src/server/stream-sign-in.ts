// The replicas' WebSocket streams (exec, connect, cp and port-forward) carry the caller's key in
// their first message rather than in a header: it is checked here as the API checks one over HTTP,
// and failures count against the same limit.
import type { Authorizer } from '../auth/authorizer.js';
import type { BearerAuthenticator } from '../auth/bearer.js';
import type { AuthFailures } from '../auth/failures.js';
import type { Principal } from '../auth/principal.js';
import { ApiError } from '../errors.js';

/** How a stream's key is checked: who it is, and whether it may open the stream on the workload. */
export interface TerminalAccess {
  bearer: Pick<BearerAuthenticator, 'authenticate'>;
  auth: Pick<Authorizer, 'check'>;
  /** Failed sign-ins, shared with the rest of the API: a key sent in the stream is guessed like any other. */
  failures: Pick<AuthFailures, 'refusal' | 'failed'>;
}

/**
 * The principal `token` signs in as for `org`, or why not: a 429 (`rate_limited`) once its address
 * has failed too often, whatever the key, or the sign-in's own error.
 */
export async function streamPrincipal(access: TerminalAccess, ip: string, token: unknown, org: string): Promise<Principal | Error> {
  const key = typeof token === 'string' ? token : undefined;
  const throttled = access.failures.refusal(ip, key);
  if (throttled) return throttled;
  try {
    return await access.bearer.authenticate(key, org);
  } catch (err) {
    const tooMany = err instanceof ApiError && err.code === 'unauthorized' ? access.failures.failed(ip, key, err) : undefined;
    return tooMany ?? (err as Error);
  }
}

/** Whether a stream's sign-in was refused for failing too often (its words then name the limit). */
export function rateLimited(err: Error): err is ApiError {
  return err instanceof ApiError && err.code === 'rate_limited';
}
