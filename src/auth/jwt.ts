import { createPublicKey } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { createLocalJWKSet, createRemoteJWKSet, decodeJwt, jwtVerify, type JWTVerifyGetKey, type KeyObject } from 'jose';
import { ApiError } from '../errors.js';
import type { TrustedIssuer } from './issuers.js';

/** Only asymmetric signatures: a shared-secret (HS*) or unsigned (none) token is never accepted. */
const ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA', 'Ed25519'];

interface Verifier {
  issuer: TrustedIssuer;
  key: JWTVerifyGetKey | KeyObject;
}

export interface VerifiedToken {
  email: string;
  claims: Record<string, unknown>;
}

/** Verifies bearer JWTs of the configured identity providers (seed §5, scheme 2). */
export class JwtVerifier {
  private readonly verifiers = new Map<string, Verifier>();

  constructor(issuers: TrustedIssuer[]) {
    for (const issuer of issuers) this.verifiers.set(issuer.issuer, { issuer, key: keySource(issuer) });
  }

  async verify(token: string): Promise<VerifiedToken> {
    let iss: unknown;
    try {
      iss = decodeJwt(token).iss;
    } catch {
      throw invalid('it is not a well-formed JWT');
    }
    const verifier = typeof iss === 'string' ? this.verifiers.get(iss) : undefined;
    if (!verifier) throw invalid(`its issuer ${JSON.stringify(iss ?? null)} is not trusted`);
    const { issuer } = verifier;
    let claims: Record<string, unknown>;
    try {
      const options = { issuer: issuer.issuer, audience: issuer.audience, algorithms: ALGORITHMS, requiredClaims: ['exp'] };
      const result = typeof verifier.key === 'function' ? await jwtVerify(token, verifier.key, options) : await jwtVerify(token, verifier.key, options);
      claims = result.payload as Record<string, unknown>;
    } catch (err) {
      throw invalid((err as Error).message || 'verification failed');
    }
    const email = claims[issuer.emailClaim];
    if (typeof email !== 'string' || !/^[^\s@/]+@[^\s@/]+$/.test(email)) throw invalid(`its '${issuer.emailClaim}' claim is not an email address`);
    return { email, claims };
  }
}

function keySource(issuer: TrustedIssuer): JWTVerifyGetKey | KeyObject {
  if (issuer.publicKey) return createPublicKey(issuer.publicKey);
  if (issuer.jwksFile) return fileKeySet(issuer.issuer, issuer.jwksFile);
  return createRemoteJWKSet(new URL(issuer.jwksUrl!));
}

/**
 * The keys of a JWKS file, read again whenever the file changes, so rotating the provider's keys
 * needs no restart. Unreadable at start: an error (Keel does not start). Unreadable later (caught
 * half-written, say): the keys read last stay in use.
 */
function fileKeySet(issuer: string, file: string): JWTVerifyGetKey {
  const read = (): { stamp: string; keys: JWTVerifyGetKey } => {
    const { mtimeMs, size } = statSync(file);
    const jwks = JSON.parse(readFileSync(file, 'utf8')) as Parameters<typeof createLocalJWKSet>[0];
    return { stamp: `${mtimeMs}/${size}`, keys: createLocalJWKSet(jwks) };
  };
  let current: { stamp: string; keys: JWTVerifyGetKey };
  try {
    current = read();
  } catch (err) {
    throw new Error(`cannot read the JWKS file of issuer '${issuer}': ${(err as Error).message}`);
  }
  return (header, token) => {
    try {
      const { mtimeMs, size } = statSync(file);
      if (`${mtimeMs}/${size}` !== current.stamp) current = read();
    } catch {
      // keep the keys read last
    }
    return current.keys(header, token);
  };
}

function invalid(reason: string): ApiError {
  return new ApiError('unauthorized', `the bearer token was rejected: ${reason}`);
}
