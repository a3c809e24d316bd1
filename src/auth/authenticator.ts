import { ApiError } from '../errors.js';
import type { Store } from '../store/types.js';
import { parseKey, secretMatches } from './keys.js';
import type { Principal } from './principal.js';

/** A key id that exists, presented with the wrong secret: answered as any bad token is, counted per key id (see AuthFailures). */
export class WrongSecret extends ApiError {}

const FRESH_MS = 1000; // a key revoked by another process stops working within this time
const MAX_ENTRIES = 10_000;

/**
 * Resolves service-account keys to principals. A verified token is remembered for FRESH_MS so the
 * hot path skips the key lookup and the hash; a local revocation forgets the org's tokens at once.
 */
export class KeyAuthenticator {
  private readonly verified = new Map<string, { principal: Principal; at: number; mark?: string }>();

  constructor(private readonly store: Store) {}

  /** The principal of a token verified less than FRESH_MS ago, if any (no parsing, no hashing). */
  recent(token: string): Principal | undefined {
    // Shared with other processes: only a mark taken now tells whether the key still stands.
    if (this.store.accessMark) return undefined;
    const hit = this.verified.get(token);
    return hit && Date.now() - hit.at < FRESH_MS ? hit.principal : undefined;
  }

  async authenticate(token: string | undefined): Promise<Principal> {
    if (!token) throw new ApiError('unauthorized', 'credentials are required: send Authorization: Bearer <token>');
    const parsed = parseKey(token);
    const mark = parsed && this.store.accessMark ? await this.store.accessMark(parsed.org) : undefined;
    if (this.store.accessMark) {
      const seen = this.verified.get(token);
      if (seen && mark !== undefined && seen.mark === mark) return seen.principal;
    } else {
      const hit = this.recent(token);
      if (hit) return hit;
    }
    const record = parsed && (await this.store.findKey(parsed.keyName));
    if (!parsed || !record || record.org !== parsed.org || record.serviceAccount !== parsed.serviceAccount || !secretMatches(parsed.secret, record.secretHash)) {
      this.verified.delete(token);
      const Refusal = record ? WrongSecret : ApiError;
      throw new Refusal('unauthorized', 'the token is invalid, expired or revoked');
    }
    const principal: Principal = { org: record.org, kind: 'serviceaccount', name: record.serviceAccount, link: `/org/${record.org}/serviceaccount/${record.serviceAccount}` };
    if (this.verified.size >= MAX_ENTRIES) this.verified.clear();
    this.verified.set(token, { principal, at: Date.now(), mark });
    return principal;
  }

  /** Forgets the verified tokens of an org's principals (after a key or service account changed). */
  invalidate(org: string): void {
    for (const [token, { principal }] of this.verified) if (principal.org === org) this.verified.delete(token);
  }

  /** Forgets every verified token (the stored state, keys included, was replaced). */
  invalidateAll(): void {
    this.verified.clear();
  }
}
