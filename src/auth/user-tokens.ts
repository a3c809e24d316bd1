// Keel's own access tokens for people: JWTs signed with one ES256 key that every process sharing the
// store uses (the first to need it creates it; the others read it), published as a JWKS. A token
// names the user item it was issued for by id (`sub`) and org: each request reads that item, so a
// deleted (or deleted and invited again) user's tokens are refused at once by every process.
import { createHash, randomUUID } from 'node:crypto';
import { exportJWK, generateKeyPair, importJWK, jwtVerify, SignJWT, type JWK } from 'jose';
import { ApiError } from '../errors.js';
import type { Store } from '../store/types.js';
import type { Principal } from './principal.js';

const KEY_RECORD = 'signing-key';
const ALG = 'ES256';

interface SigningKey {
  kid: string;
  privateKey: Awaited<ReturnType<typeof importJWK>>;
  publicJwk: JWK;
}

export interface UserTokenClaims {
  org: string;
  email: string;
  /** The user item's id. */
  sub: string;
}

export class UserTokens {
  private key?: Promise<SigningKey>;

  constructor(
    private readonly store: Store,
    private readonly ttlMs: number,
  ) {}

  /** The signing key, created and stored once for every process. */
  private signingKey(): Promise<SigningKey> {
    this.key ??= this.loadKey().catch((err) => {
      this.key = undefined;
      throw err;
    });
    return this.key;
  }

  private async loadKey(): Promise<SigningKey> {
    let stored = await this.store.findSignIn(KEY_RECORD, 'current');
    if (!stored) {
      const pair = await generateKeyPair(ALG, { extractable: true });
      const privateJwk = await exportJWK(pair.privateKey);
      const publicJwk = await exportJWK(pair.publicKey);
      const kid = createHash('sha256').update(JSON.stringify(publicJwk)).digest('base64url').slice(0, 16);
      await this.store.transaction((tx) => tx.putSignIn(KEY_RECORD, 'current', JSON.stringify({ kid, privateJwk, publicJwk }), 0, true));
      stored = await this.store.findSignIn(KEY_RECORD, 'current');
      if (!stored) throw new Error('the signing key was not stored');
    }
    const { kid, privateJwk, publicJwk } = JSON.parse(stored) as { kid: string; privateJwk: JWK; publicJwk: JWK };
    return { kid, privateKey: await importJWK(privateJwk, ALG), publicJwk: { ...publicJwk, kid, alg: ALG, use: 'sig' } };
  }

  async jwks(): Promise<{ keys: JWK[] }> {
    return { keys: [(await this.signingKey()).publicJwk] };
  }

  /** A token for the user item `sub` of `org`, issued by and for `issuer` (Keel's public URL). */
  async mint(issuer: string, claims: UserTokenClaims): Promise<{ token: string; expiresIn: number }> {
    const key = await this.signingKey();
    const expiresIn = Math.floor(this.ttlMs / 1000);
    const token = await new SignJWT({ email: claims.email, org: claims.org })
      .setProtectedHeader({ alg: ALG, kid: key.kid, typ: 'at+jwt' })
      .setIssuer(issuer)
      .setAudience(issuer)
      .setSubject(claims.sub)
      .setIssuedAt()
      .setExpirationTime(Math.floor(Date.now() / 1000) + expiresIn)
      .setJti(randomUUID())
      .sign(key.privateKey);
    return { token, expiresIn };
  }

  /** Whether the token carries Keel's own key id (then only Keel's key may verify it). */
  async owns(kid: unknown): Promise<boolean> {
    return typeof kid === 'string' && kid === (await this.signingKey()).kid;
  }

  /** The user a Keel token names, while it is valid and its user item exists; else 401. */
  async authenticate(token: string): Promise<Principal> {
    const key = await this.signingKey();
    let payload: Record<string, unknown>;
    try {
      ({ payload } = await jwtVerify(token, await importJWK(key.publicJwk, ALG), { algorithms: [ALG], requiredClaims: ['exp', 'sub', 'iss', 'aud'] }));
    } catch (err) {
      throw new ApiError('unauthorized', `the bearer token was rejected: ${(err as Error).message || 'verification failed'}`);
    }
    const { org, email, sub, iss, aud } = payload;
    if (typeof org !== 'string' || typeof email !== 'string' || typeof sub !== 'string' || aud !== iss) {
      throw new ApiError('unauthorized', 'the bearer token was rejected: it is not a Keel user token');
    }
    const user = await this.store.get({ org, kind: 'user', gvc: '', name: email });
    if (!user || user.id !== sub) throw new ApiError('unauthorized', 'the token is invalid, expired or revoked');
    return { org, kind: 'user', name: email, link: `/org/${org}/user/${email}`, claims: payload };
  }
}
