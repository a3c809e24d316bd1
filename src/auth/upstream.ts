// An upstream OpenID provider that proves who people are (KEEL_OIDC_ISSUER and its client), through
// openid-client: authorization code with PKCE, state and nonce; a verified email is required.
import * as oidc from 'openid-client';

export interface UpstreamSettings {
  issuer: string;
  clientId: string;
  clientSecret: string;
}

export interface UpstreamStart {
  url: string;
  state: string;
  nonce: string;
  verifier: string;
}

export class Upstream {
  private config?: Promise<oidc.Configuration>;

  constructor(private readonly settings: UpstreamSettings) {}

  get issuer(): string {
    return this.settings.issuer;
  }

  /** The provider's configuration, discovered once (again after a failure). */
  private configuration(): Promise<oidc.Configuration> {
    this.config ??= this.discover().catch((err) => {
      this.config = undefined;
      throw err;
    });
    return this.config;
  }

  private async discover(): Promise<oidc.Configuration> {
    const { issuer, clientId, clientSecret } = this.settings;
    const insecure = issuer.startsWith('http:');
    const options = insecure ? { execute: [oidc.allowInsecureRequests] } : undefined;
    // client_secret_basic unless the provider lists only client_secret_post.
    const basic = await oidc.discovery(new URL(issuer), clientId, undefined, oidc.ClientSecretBasic(clientSecret), options);
    const methods = basic.serverMetadata().token_endpoint_auth_methods_supported;
    if (methods && !methods.includes('client_secret_basic') && methods.includes('client_secret_post')) {
      return oidc.discovery(new URL(issuer), clientId, undefined, oidc.ClientSecretPost(clientSecret), options);
    }
    return basic;
  }

  /** Where to send the browser, and what its return must match. */
  async start(redirectUri: string): Promise<UpstreamStart> {
    const config = await this.configuration();
    const verifier = oidc.randomPKCECodeVerifier();
    const state = oidc.randomState();
    const nonce = oidc.randomNonce();
    const url = oidc.buildAuthorizationUrl(config, {
      redirect_uri: redirectUri,
      scope: 'openid email profile',
      response_type: 'code',
      state,
      nonce,
      code_challenge: await oidc.calculatePKCECodeChallenge(verifier),
      code_challenge_method: 'S256',
    });
    return { url: url.href, state, nonce, verifier };
  }

  /** The verified email of the person the provider sent back to `callbackUrl`; throws with the reason otherwise. */
  async finish(callbackUrl: URL, started: { state: string; nonce: string; verifier: string }): Promise<string> {
    const config = await this.configuration();
    const tokens = await oidc.authorizationCodeGrant(config, callbackUrl, { pkceCodeVerifier: started.verifier, expectedState: started.state, expectedNonce: started.nonce, idTokenExpected: true });
    let claims: Record<string, unknown> | undefined = tokens.claims();
    // Providers that keep scope claims out of the ID token (as the spec allows) tell them at UserInfo.
    if (claims && claims.email === undefined) claims = await oidc.fetchUserInfo(config, tokens.access_token, String(claims.sub));
    const email = claims?.email;
    if (typeof email !== 'string' || !/^[^\s@/]+@[^\s@/]+$/.test(email)) throw new Error('the provider did not tell your email address');
    if (claims?.email_verified !== true) throw new Error(`the provider has not verified ${email}`);
    return email;
  }
}
