/** Who is making a request, as policies and group members name it. */
export interface Principal {
  /** The org the principal belongs to (service accounts, identities and users live in one org). */
  org: string;
  /** `identity`: a workload's identity, calling with its replica's CPLN_TOKEN (replica-tokens.ts). */
  kind: 'serviceaccount' | 'user' | 'identity';
  name: string;
  /** Full link: `/org/o/serviceaccount/s`, `/org/o/gvc/g/identity/i` or `/org/o/user/email`. */
  link: string;
  /** Token claims, for group identityMatcher expressions (JWT users). */
  claims?: Record<string, unknown>;
  /** The request this principal made (set per request; recorded in audit events). */
  requestId?: string;
  remoteIp?: string;
  /** The store's AccessFeed mark when the request arrived (a shared database): a catch-up sent after it serves the request's reads. */
  mark?: number;
}

/**
 * Who a principal is, the same in every org: a service account by its link, a JWT user by its
 * issuer and email (its link names the org in the path, which the caller chooses).
 */
export function identity(principal: Principal): string {
  if (principal.kind === 'user') return `user:${String(principal.claims?.iss ?? '')}\n${principal.name}`;
  return principal.link;
}
