import { decodeProtectedHeader } from 'jose';
import type { KeyAuthenticator } from './authenticator.js';
import type { JwtVerifier } from './jwt.js';
import { parseKey } from './keys.js';
import type { Principal } from './principal.js';
import type { UserTokens } from './user-tokens.js';

/**
 * Resolves a bearer token of either scheme, told apart by shape: a service-account key
 * (`s…16.<base64url(org.sa.key)>.<secret>`) or a JWT of a trusted identity provider. A JWT user
 * is the user /org/{org}/user/{email} of the org the request addresses; users exist per org.
 * A JWT signed with Keel's own key is a person's token from Keel's sign-in (its user item decides).
 */
export class BearerAuthenticator {
  constructor(
    private readonly keys: KeyAuthenticator,
    private readonly jwt: JwtVerifier,
    private readonly users: UserTokens,
  ) {}

  /** `mark`: the AccessFeed mark of a caller that took one when its request arrived (else one is taken now). */
  async authenticate(token: string | undefined, org: string | undefined, mark?: number): Promise<Principal> {
    const current = token ? this.keys.current(mark) : true;
    if (current !== true) await current;
    const known = token && this.keys.recent(token);
    if (known) return known;
    const kid = token && !parseKey(token) ? jwtKid(token) : null;
    if (!token || kid === null) return this.keys.authenticate(token);
    if (await this.users.owns(kid)) return this.users.authenticate(token);
    const { email, claims } = await this.jwt.verify(token);
    const at = org ?? '';
    return { org: at, kind: 'user', name: email, link: `/org/${at}/user/${email}`, claims };
  }
}

/** The key id of a JWT's header (undefined when it names none), or null when the token is no JWT. */
function jwtKid(token: string): string | undefined | null {
  if (token.split('.').length !== 3) return null;
  try {
    const header = decodeProtectedHeader(token);
    return typeof header.alg === 'string' ? header.kid : null;
  } catch {
    return null;
  }
}

