import { decodeProtectedHeader } from 'jose';
import type { KeyAuthenticator } from './authenticator.js';
import type { JwtVerifier } from './jwt.js';
import { parseKey } from './keys.js';
import type { Principal } from './principal.js';

/**
 * Resolves a bearer token of either scheme, told apart by shape: a service-account key
 * (`s…16.<base64url(org.sa.key)>.<secret>`) or a JWT of a trusted identity provider. A JWT user
 * is the user /org/{org}/user/{email} of the org the request addresses; users exist per org.
 */
export class BearerAuthenticator {
  constructor(
    private readonly keys: KeyAuthenticator,
    private readonly jwt: JwtVerifier,
  ) {}

  async authenticate(token: string | undefined, org: string | undefined): Promise<Principal> {
    const known = token && this.keys.recent(token);
    if (known) return known;
    if (!token || parseKey(token) || !looksLikeJwt(token)) return this.keys.authenticate(token);
    const { email, claims } = await this.jwt.verify(token);
    const at = org ?? '';
    return { org: at, kind: 'user', name: email, link: `/org/${at}/user/${email}`, claims };
  }
}

function looksLikeJwt(token: string): boolean {
  if (token.split('.').length !== 3) return false;
  try {
    return typeof decodeProtectedHeader(token).alg === 'string';
  } catch {
    return false;
  }
}

