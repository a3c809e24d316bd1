import { ApiError } from '../errors.js';
import type { Store } from '../store/types.js';
import { parseKey, secretMatches } from './keys.js';
import type { Principal } from './principal.js';
import { isReplicaToken, replicaTokenHash } from './replica-tokens.js';

/** A key id that exists, presented with the wrong secret: answered as any bad token is, counted per key id (see AuthFailures). */
export class WrongSecret extends ApiError {}

/** On SQLite: a key revoked (or a replica stopped) by another process (the `keel` command) stops working within this time. */
const FRESH_MS = 1000;
const MAX_ENTRIES = 10_000;

/**
 * Resolves service-account keys and replica tokens (CPLN_TOKEN, acting as the workload's identity)
 * to principals. A verified token is remembered so the hot path skips the key lookup and the hash;
 * a local revocation forgets the org's tokens at once. Where other processes share the database
 * (store.accessFeed) it is remembered until a catch-up reports its org's keys or access changed:
 * each request waits for a catch-up sent after it arrived before asking recent() (server/app.ts).
 * Elsewhere it is remembered for FRESH_MS.
 */
export class KeyAuthenticator {
  private readonly verified = new Map<string, { principal: Principal; at: number }>();
  private readonly freshMs: number;
  /** Counts invalidations: a lookup that one raced is not remembered. */
  private generation = 0;

  constructor(private readonly store: Store) {
    this.freshMs = store.accessFeed ? Infinity : FRESH_MS;
  }

  /**
   * Where other processes share the database: true once a catch-up sent after `mark` (or this call)
   * has told this process of their changes, or has failed and made it forget every token (see AccessFeed).
   */
  current(mark?: number): boolean | Promise<boolean> {
    return this.store.accessFeed?.caughtUp(mark) ?? true;
  }

  /** The principal of a token verified and still current, if any (no parsing, no hashing). */
  recent(token: string): Principal | undefined {
    const hit = this.verified.get(token);
    return hit && (this.freshMs === Infinity || Date.now() - hit.at < this.freshMs) ? hit.principal : undefined;
  }

  async authenticate(token: string | undefined): Promise<Principal> {
    if (!token) throw new ApiError('unauthorized', 'credentials are required: send Authorization: Bearer <token>');
    const hit = this.recent(token);
    if (hit) return hit;
    const generation = this.generation;
    if (isReplicaToken(token)) return this.remember(token, await this.replicaPrincipal(token), generation);
    const parsed = parseKey(token);
    const record = parsed && (await this.store.findKey(parsed.keyName));
    if (!parsed || !record || record.org !== parsed.org || record.serviceAccount !== parsed.serviceAccount || !secretMatches(parsed.secret, record.secretHash)) {
      this.verified.delete(token);
      const Refusal = record ? WrongSecret : ApiError;
      throw new Refusal('unauthorized', 'the token is invalid, expired or revoked');
    }
    return this.remember(token, { org: record.org, kind: 'serviceaccount', name: record.serviceAccount, link: `/org/${record.org}/serviceaccount/${record.serviceAccount}` }, generation);
  }

  /** The identity a running replica's token acts as; a token of no running replica is refused as any bad token is. */
  private async replicaPrincipal(token: string): Promise<Principal> {
    const record = await this.store.findReplicaToken(replicaTokenHash(token));
    if (!record) {
      this.verified.delete(token);
      throw new ApiError('unauthorized', 'the token is invalid, expired or revoked');
    }
    return { org: record.org, kind: 'identity', name: record.identity, link: `/org/${record.org}/gvc/${record.gvc}/identity/${record.identity}` };
  }

  /** Remembers the token unless an invalidation came after its lookup began (generation then). */
  private remember(token: string, principal: Principal, generation: number): Principal {
    if (generation !== this.generation) return principal;
    if (this.verified.size >= MAX_ENTRIES) this.verified.clear();
    this.verified.set(token, { principal, at: Date.now() });
    return principal;
  }

  /** Forgets the verified tokens of an org's principals (after a key or service account changed). */
  invalidate(org: string): void {
    this.generation++;
    for (const [token, { principal }] of this.verified) if (principal.org === org) this.verified.delete(token);
  }

  /** Forgets every verified token (the stored state, keys included, was replaced). */
  invalidateAll(): void {
    this.generation++;
    this.verified.clear();
  }
}
