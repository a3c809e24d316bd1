// Keel as an OAuth 2.0 authorization server for its own clients (DESIGN.md, "Sign-in for people"):
// server metadata, JWKS, the device authorization grant for `keel login` (client `keel-cli`),
// authorization code + PKCE S256 for the console (client `keel-console`), and the browser pages
// where a person proves who they are: Keel's directory (email + password) or an upstream OpenID
// provider. Records between steps live in the store (any process may serve any step).
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { createHash, randomBytes, randomInt } from 'node:crypto';
import { Attempts, Directory, hashOf, passwordProblem } from '../auth/directory.js';
import type { Upstream } from '../auth/upstream.js';
import type { UserTokens } from '../auth/user-tokens.js';
import type { Config } from '../config.js';
import { coreBase } from '../public-url.js';
import type { Store } from '../store/types.js';

export const CLI_CLIENT = 'keel-cli';
export const CONSOLE_CLIENT = 'keel-console';
const DEVICE_GRANT = 'urn:ietf:params:oauth:grant-type:device_code';
const INTERVAL_S = 5;
const CODE_MS = 60_000;
const UPSTREAM_MS = 10 * 60_000;
/** How long a used or expired device code is remembered, to answer expired_token rather than invalid_grant. */
const REMEMBER_MS = 3_600_000;
const USER_CODE_LETTERS = 'BCDFGHJKLMNPQRSTVWXZ';

interface DeviceRecord {
  userCode: string;
  org?: string;
  status: 'pending' | 'approved' | 'denied' | 'used';
  expires: number;
  lastPoll: number;
  interval: number;
  email?: string;
  tokenOrg?: string;
  sub?: string;
}

interface AuthorizeRequest {
  redirectUri: string;
  challenge: string;
  state: string;
  org?: string;
}

type Pending = { to: 'device'; userCode: string } | { to: 'authorize'; request: AuthorizeRequest };

class OAuthError extends Error {
  constructor(
    readonly error: string,
    readonly description: string,
    readonly status = 400,
  ) {
    super(description);
  }
}

export interface SignInDeps {
  config: Config;
  store: Store;
  tokens: UserTokens;
  directory: Directory;
  upstream?: Upstream;
}

export function mountSignIn(root: FastifyInstance, deps: SignInDeps): void {
  const { config, store, tokens, directory, upstream } = deps;
  // Password tries: per address and per email; device and token requests: per address.
  const byAddress = new Attempts(20, 60_000);
  const byEmail = new Attempts(5, 15 * 60_000);
  const deviceRequests = new Attempts(30, 60_000);

  root.register(async (app) => {
    app.removeContentTypeParser('application/x-www-form-urlencoded');
    app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (_request, body, done) => {
      done(null, Object.fromEntries(new URLSearchParams(body as string)));
    });
    /** A public route with its summary and query parameters for the OpenAPI document. */
    const described = (summary: string, query: Record<string, string> = {}) => ({
      config: { public: true },
      schema: { summary, querystring: { type: 'object', properties: Object.fromEntries(Object.entries(query).map(([k, d]) => [k, { type: 'string', description: d }])) } },
    });
    const issuerOf = (request: FastifyRequest) => coreBase(config, request);
    // The pages' forms are posted only from Keel's own pages: another site's page cannot make a
    // signed-in browser allow someone else's code (browsers send Origin with every cross-site POST).
    const sameOrigin = (request: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void) => {
      const origin = request.headers.origin;
      if (origin === 'null' || (origin && origin !== new URL(issuerOf(request)).origin)) {
        page(reply, 403, 'Refused', '<p id="error" role="alert">This form may only be sent from Keel\'s own pages.</p>');
        return;
      }
      done();
    };
    /** A form's POST: described as any route, and refused when another site's page sent it. */
    const form = (summary: string) => ({ ...described(summary), preHandler: sameOrigin });

    const metadata = (request: FastifyRequest) => {
      const base = issuerOf(request);
      return {
        issuer: base,
        authorization_endpoint: `${base}/login/authorize`,
        token_endpoint: `${base}/login/token`,
        device_authorization_endpoint: `${base}/login/device/code`,
        jwks_uri: `${base}/login/jwks`,
        response_types_supported: ['code'],
        grant_types_supported: ['authorization_code', DEVICE_GRANT],
        code_challenge_methods_supported: ['S256'],
        token_endpoint_auth_methods_supported: ['none'],
        subject_types_supported: ['public'],
        id_token_signing_alg_values_supported: ['ES256'],
        scopes_supported: ['openid', 'email'],
        claims_supported: ['iss', 'aud', 'sub', 'email', 'org', 'exp', 'iat'],
      };
    };
    app.get('/.well-known/oauth-authorization-server', described('OAuth 2.0 authorization server metadata (RFC 8414)'), async (request) => metadata(request));
    app.get('/.well-known/openid-configuration', described('The same metadata, at the OpenID discovery path'), async (request) => metadata(request));
    app.get('/login/jwks', described('The public key that signs Keel user tokens (JWKS)'), async () => tokens.jwks());

    // RFC 8628 §3.1–3.2
    app.post('/login/device/code', described('Device authorization request of keel-cli (RFC 8628; form: client_id, org?)'), async (request, reply) => {
      try {
        limit(deviceRequests, `a:${request.ip}`);
        deviceRequests.fail(`a:${request.ip}`); // every request counts, granted or not
        const body = formOf(request);
        if (body.client_id !== CLI_CLIENT) throw new OAuthError('invalid_client', `unknown client '${body.client_id ?? ''}': the device grant is for ${CLI_CLIENT}`, 401);
        const org = body.org || undefined;
        const deviceCode = randomBytes(32).toString('base64url');
        const userCode = Array.from({ length: 8 }, () => USER_CODE_LETTERS[randomInt(USER_CODE_LETTERS.length)]).join('');
        const expires = Date.now() + config.deviceCodeTtlMs;
        const record: DeviceRecord = { userCode, org, status: 'pending', expires, lastPoll: 0, interval: INTERVAL_S };
        await store.transaction(async (tx) => {
          await tx.putSignIn('device', hashOf(deviceCode), JSON.stringify(record), expires + REMEMBER_MS);
          await tx.putSignIn('user-code', userCode, hashOf(deviceCode), expires);
        });
        const base = issuerOf(request);
        const shown = `${userCode.slice(0, 4)}-${userCode.slice(4)}`;
        return reply.header('cache-control', 'no-store').send({
          device_code: deviceCode,
          user_code: shown,
          verification_uri: `${base}/login/device`,
          verification_uri_complete: `${base}/login/device?user_code=${shown}`,
          expires_in: Math.floor(config.deviceCodeTtlMs / 1000),
          interval: INTERVAL_S,
        });
      } catch (err) {
        return oauthError(reply, err);
      }
    });

    app.post('/login/token', described('Token request: device_code or authorization_code grant (form)'), async (request, reply) => {
      try {
        const body = formOf(request);
        reply.header('cache-control', 'no-store');
        if (body.grant_type === DEVICE_GRANT) return reply.send(await deviceToken(request, body));
        if (body.grant_type === 'authorization_code') return reply.send(await codeToken(request, body));
        throw new OAuthError('unsupported_grant_type', `grant_type must be ${DEVICE_GRANT} or authorization_code`);
      } catch (err) {
        return oauthError(reply, err);
      }
    });

    const deviceToken = async (request: FastifyRequest, body: Record<string, string>) => {
      if (body.client_id !== CLI_CLIENT) throw new OAuthError('invalid_client', `unknown client '${body.client_id ?? ''}'`, 401);
      const key = hashOf(body.device_code ?? '');
      const data = body.device_code ? await store.findSignIn('device', key) : undefined;
      if (!data) throw new OAuthError('invalid_grant', 'the device code is unknown or was already used');
      const record = JSON.parse(data) as DeviceRecord;
      const now = Date.now();
      if (record.status === 'used') throw new OAuthError('invalid_grant', 'the device code was already used');
      if (record.status === 'denied') throw new OAuthError('access_denied', 'the sign-in was denied');
      if (now >= record.expires) throw new OAuthError('expired_token', 'the device code expired: run keel login again');
      if (record.status === 'pending') {
        const tooSoon = now - record.lastPoll < record.interval * 1000;
        const next = { ...record, lastPoll: now, interval: tooSoon ? record.interval + 5 : record.interval };
        await store.transaction((tx) => tx.putSignIn('device', key, JSON.stringify(next), record.expires + REMEMBER_MS));
        if (tooSoon) throw new OAuthError('slow_down', `poll at most every ${next.interval} seconds`);
        throw new OAuthError('authorization_pending', 'the code has not been confirmed yet');
      }
      // Approved: exactly one poll takes it.
      const taken = await store.transaction(async (tx) => {
        const current = await tx.takeSignIn('device', key);
        await tx.putSignIn('device', key, JSON.stringify({ ...record, status: 'used' }), record.expires + REMEMBER_MS);
        return current && (JSON.parse(current) as DeviceRecord).status === 'approved' ? (JSON.parse(current) as DeviceRecord) : undefined;
      });
      if (!taken?.sub) throw new OAuthError('invalid_grant', 'the device code was already used');
      return tokenAnswer(request, taken.tokenOrg!, taken.email!, taken.sub);
    };

    const codeToken = async (request: FastifyRequest, body: Record<string, string>) => {
      if (body.client_id !== CONSOLE_CLIENT) throw new OAuthError('invalid_client', `unknown client '${body.client_id ?? ''}'`, 401);
      const data = body.code ? await store.transaction((tx) => tx.takeSignIn('code', hashOf(body.code))) : undefined;
      if (!data) throw new OAuthError('invalid_grant', 'the authorization code is unknown, expired or already used');
      const code = JSON.parse(data) as { redirectUri: string; challenge: string; org: string; email: string; sub: string };
      if (body.redirect_uri !== code.redirectUri) throw new OAuthError('invalid_grant', 'redirect_uri differs from the authorization request');
      if (!body.code_verifier || createHash('sha256').update(body.code_verifier).digest('base64url') !== code.challenge) {
        throw new OAuthError('invalid_grant', 'code_verifier does not match the code_challenge');
      }
      return tokenAnswer(request, code.org, code.email, code.sub);
    };

    const tokenAnswer = async (request: FastifyRequest, org: string, email: string, sub: string) => {
      const { token, expiresIn } = await tokens.mint(issuerOf(request), { org, email, sub });
      return { access_token: token, token_type: 'Bearer', expires_in: expiresIn, org, email };
    };

    /** The user item a person signs in as: in `org` when named, else their only org. */
    const membership = async (email: string, org: string | undefined): Promise<{ org: string; sub: string }> => {
      const orgs = org ? [org] : await store.orgs();
      const found: Array<{ org: string; sub: string }> = [];
      for (const o of orgs) {
        const user = await store.get({ org: o, kind: 'user', gvc: '', name: email });
        if (user) found.push({ org: o, sub: user.id });
      }
      if (found.length === 1) return found[0];
      if (found.length === 0) throw new OAuthError('access_denied', org ? `${email} has not been invited to org '${org}'` : `${email} has not been invited to any org`, 403);
      throw new OAuthError('invalid_request', `${email} belongs to several orgs (${found.map((f) => f.org).join(', ')}): sign in again naming one (keel login --org ORG)`);
    };

    /** Checks an email and password (rate limited per address and per email); the email on success. */
    const passwordSignIn = async (request: FastifyRequest, email: string, password: string): Promise<string> => {
      const who = email.trim().toLowerCase();
      limit(byAddress, request.ip);
      limit(byEmail, who);
      if (!who || !(await directory.verify(who, password))) {
        byAddress.fail(request.ip);
        byEmail.fail(who);
        throw new OAuthError('access_denied', 'the email or password is wrong', 401);
      }
      return who;
    };

    // The page keel login points at: the code, then who you are, then allow or deny.
    app.get('/login/device', described('The page where a person confirms a keel login code (HTML)', { user_code: 'The code keel login printed' }), async (request, reply) => {
      const code = String((request.query as Record<string, unknown>).user_code ?? '');
      return page(reply, 200, 'Confirm a sign-in', devicePage(code, upstream !== undefined));
    });

    app.post('/login/device', form('Allow or deny a keel login code (HTML form)'), async (request, reply) => {
      const body = formOf(request);
      const userCode = normalizeCode(body.user_code);
      try {
        const deviceKey = userCode ? await store.findSignIn('user-code', userCode) : undefined;
        if (!deviceKey) throw new OAuthError('invalid_grant', 'this code is unknown, expired or already used: run keel login again', 400);
        if (body.action === 'deny') {
          await settleDevice(userCode, { status: 'denied' });
          return page(reply, 200, 'Sign-in denied', '<p id="result">The sign-in was denied. You may close this window.</p>');
        }
        if (upstream) {
          const started = await startUpstream(request, { to: 'device', userCode });
          return reply.redirect(started, 303);
        }
        const email = await passwordSignIn(request, body.email ?? '', body.password ?? '');
        return await approveDevice(reply, userCode, email);
      } catch (err) {
        return page(reply, errStatus(err), 'Sign-in failed', `<p id="error" role="alert">${esc((err as Error).message)}</p>${devicePage(userCode ? `${userCode.slice(0, 4)}-${userCode.slice(4)}` : '', upstream !== undefined)}`);
      }
    });

    const approveDevice = async (reply: FastifyReply, userCode: string, email: string) => {
      const deviceKey = await store.findSignIn('user-code', userCode);
      const device = deviceKey && (await store.findSignIn('device', deviceKey));
      if (!device) throw new OAuthError('invalid_grant', 'this code is unknown, expired or already used: run keel login again');
      const { org, sub } = await membership(email, (JSON.parse(device) as DeviceRecord).org);
      await settleDevice(userCode, { status: 'approved', email, tokenOrg: org, sub });
      return page(reply, 200, 'Signed in', `<p id="result">Signed in as <b>${esc(email)}</b> to org <b>${esc(org)}</b>. Go back to your terminal.</p>`);
    };

    /** Uses the user code (once) and records the outcome on its device code. */
    const settleDevice = async (userCode: string, outcome: Partial<DeviceRecord>) => {
      const done = await store.transaction(async (tx) => {
        const deviceKey = await tx.takeSignIn('user-code', userCode);
        if (!deviceKey) return false;
        const data = await tx.takeSignIn('device', deviceKey);
        if (!data) return false;
        const record = { ...(JSON.parse(data) as DeviceRecord), ...outcome };
        await tx.putSignIn('device', deviceKey, JSON.stringify(record), record.expires + REMEMBER_MS);
        return true;
      });
      if (!done) throw new OAuthError('invalid_grant', 'this code is unknown, expired or already used: run keel login again');
    };

    // Authorization code + PKCE for the console.
    app.get('/login/authorize', described('Authorization request of the console (code + PKCE S256; HTML sign-in page)', { client_id: 'keel-console', response_type: 'code', redirect_uri: "Keel's /console", code_challenge: 'S256 challenge', code_challenge_method: 'S256', state: 'Returned as is', org: 'The org to sign in to (default: the only one)' }), async (request, reply) => {
      const query = request.query as Record<string, string>;
      // Opened by hand (a bookmark, a typed address): the console starts a sign-in of its own.
      if (query.client_id === undefined) return reply.redirect(`${issuerOf(request)}/console/`, 303);
      try {
        const authorize = authorizeRequest(request, query);
        if (upstream) return reply.redirect(await startUpstream(request, { to: 'authorize', request: authorize }), 303);
        return page(reply, 200, 'Sign in to Keel', authorizePage(query));
      } catch (err) {
        return page(reply, errStatus(err), 'Sign-in failed', `<p id="error" role="alert">${esc((err as Error).message)}</p>`);
      }
    });

    app.post('/login/authorize', form('Sign in with email and password for the console (HTML form)'), async (request, reply) => {
      const body = formOf(request);
      let authorize: AuthorizeRequest;
      try {
        authorize = authorizeRequest(request, body);
      } catch (err) {
        return page(reply, errStatus(err), 'Sign-in failed', `<p id="error" role="alert">${esc((err as Error).message)}</p>`);
      }
      try {
        if (upstream) return reply.redirect(await startUpstream(request, { to: 'authorize', request: authorize }), 303);
        const email = await passwordSignIn(request, body.email ?? '', body.password ?? '');
        return reply.redirect(await issueCode(authorize, email), 303);
      } catch (err) {
        return page(reply, errStatus(err), 'Sign in to Keel', `<p id="error" role="alert">${esc((err as Error).message)}</p>${authorizePage(body)}`);
      }
    });

    const authorizeRequest = (request: FastifyRequest, q: Record<string, string>): AuthorizeRequest => {
      if (q.client_id !== CONSOLE_CLIENT) throw new OAuthError('invalid_client', `unknown client '${q.client_id ?? ''}'`);
      if (q.response_type !== 'code') throw new OAuthError('unsupported_response_type', 'response_type must be code');
      if (q.code_challenge_method !== 'S256' || !/^[A-Za-z0-9_-]{43}$/.test(q.code_challenge ?? '')) throw new OAuthError('invalid_request', 'PKCE with code_challenge_method S256 is required');
      let redirect: URL;
      try {
        redirect = new URL(q.redirect_uri ?? '');
      } catch {
        throw new OAuthError('invalid_request', 'redirect_uri is not a URL');
      }
      const own = new URL(issuerOf(request));
      if (redirect.origin !== own.origin || !redirect.pathname.startsWith(`${own.pathname.replace(/\/$/, '')}/console`)) {
        throw new OAuthError('invalid_request', `redirect_uri must be Keel's console (${own.origin}${own.pathname.replace(/\/$/, '')}/console…)`);
      }
      return { redirectUri: redirect.href, challenge: q.code_challenge, state: String(q.state ?? '').slice(0, 512), org: q.org || undefined };
    };

    const issueCode = async (authorize: AuthorizeRequest, email: string): Promise<string> => {
      const { org, sub } = await membership(email, authorize.org);
      const code = randomBytes(32).toString('base64url');
      const record = { redirectUri: authorize.redirectUri, challenge: authorize.challenge, org, email, sub };
      await store.transaction((tx) => tx.putSignIn('code', hashOf(code), JSON.stringify(record), Date.now() + CODE_MS));
      const to = new URL(authorize.redirectUri);
      to.searchParams.set('code', code);
      if (authorize.state) to.searchParams.set('state', authorize.state);
      return to.href;
    };

    const startUpstream = async (request: FastifyRequest, pending: Pending): Promise<string> => {
      const started = await upstream!.start(`${issuerOf(request)}/login/callback`);
      const record = { state: started.state, nonce: started.nonce, verifier: started.verifier, pending };
      await store.transaction((tx) => tx.putSignIn('upstream', hashOf(started.state), JSON.stringify(record), Date.now() + UPSTREAM_MS));
      return started.url;
    };

    app.get('/login/callback', described("The upstream OpenID provider's redirect back to Keel", { code: 'Authorization code', state: 'State', error: 'Error code', error_description: 'Error text', iss: 'Issuer' }), async (request, reply) => {
      const query = request.query as Record<string, string>;
      try {
        if (!upstream) throw new OAuthError('invalid_request', 'no upstream OpenID provider is configured', 404);
        if (query.error) throw new OAuthError('access_denied', `the provider refused: ${query.error_description || query.error}`, 403);
        const data = query.state ? await store.transaction((tx) => tx.takeSignIn('upstream', hashOf(query.state))) : undefined;
        if (!data) throw new OAuthError('invalid_request', 'this sign-in is unknown, expired or already finished: start again', 400);
        const started = JSON.parse(data) as { state: string; nonce: string; verifier: string; pending: Pending };
        const callback = new URL(`${issuerOf(request)}/login/callback`);
        callback.search = new URLSearchParams(query).toString();
        let email: string;
        try {
          email = (await upstream.finish(callback, started)).toLowerCase();
        } catch (err) {
          throw new OAuthError('access_denied', `sign-in through ${upstream.issuer} failed: ${(err as Error).message}`, 403);
        }
        if (started.pending.to === 'device') return await approveDevice(reply, started.pending.userCode, email);
        return reply.redirect(await issueCode(started.pending.request, email), 303);
      } catch (err) {
        return page(reply, errStatus(err), 'Sign-in failed', `<p id="error" role="alert">${esc((err as Error).message)}</p>`);
      }
    });

    // An invitation link: set a password (directory), or learn where to sign in (upstream provider).
    app.get('/login/invitation', described('An invitation link: the page to choose a password (HTML)', { token: 'The invitation secret' }), async (request, reply) => {
      const token = String((request.query as Record<string, unknown>).token ?? '');
      const invitation = token ? await directory.invitation(token) : undefined;
      if (!invitation) return page(reply, 404, 'Invitation', '<p id="error" role="alert">This invitation is unknown, expired or already used.</p>');
      if (upstream) {
        return page(reply, 200, 'Invitation', `<p id="result">${esc(invitation.email)} is invited to org <b>${esc(invitation.org)}</b>. Sign in through ${esc(upstream.issuer)}: run <code>keel login</code>, or use the console's Sign in.</p>`);
      }
      return page(reply, 200, 'Choose a password', invitationPage(token, invitation.email, invitation.org));
    });

    app.post('/login/invitation', form('Set the password of an invitation (HTML form)'), async (request, reply) => {
      const body = formOf(request);
      if (upstream) return page(reply, 400, 'Invitation', `<p id="error" role="alert">Passwords are not used here: sign in through ${esc(upstream.issuer)}.</p>`);
      const problem = passwordProblem(body.password);
      const invitation = body.token ? await directory.invitation(body.token) : undefined;
      if (!invitation) return page(reply, 404, 'Invitation', '<p id="error" role="alert">This invitation is unknown, expired or already used.</p>');
      if (problem) return page(reply, 400, 'Choose a password', `<p id="error" role="alert">${esc(problem)}</p>${invitationPage(body.token, invitation.email, invitation.org)}`);
      const email = await directory.accept(body.token, body.password);
      if (!email) return page(reply, 404, 'Invitation', '<p id="error" role="alert">This invitation is unknown, expired or already used.</p>');
      return page(reply, 200, 'Password set', `<p id="result">The password of ${esc(email)} is set. Sign in with <code>keel login</code> or the console.</p>`);
    });
  });
}

/** The link an invited person opens (to set a password, or to learn where to sign in). */
export function invitationLink(base: string, secret: string): string {
  return `${base}/login/invitation?token=${secret}`;
}

function limit(attempts: Attempts, key: string): void {
  const wait = attempts.retryAfter(key);
  if (wait > 0) throw new OAuthError('slow_down', `too many attempts: try again in ${wait} seconds`, 429);
}

function formOf(request: FastifyRequest): Record<string, string> {
  const body = request.body;
  if (!body || typeof body !== 'object') return {};
  return Object.fromEntries(Object.entries(body as Record<string, unknown>).filter(([, v]) => typeof v === 'string')) as Record<string, string>;
}

function normalizeCode(code: string | undefined): string {
  const letters = String(code ?? '').toUpperCase().replace(/[\s-]/g, '');
  return /^[A-Z]{8}$/.test(letters) ? letters : '';
}

function oauthError(reply: FastifyReply, err: unknown) {
  if (!(err instanceof OAuthError)) throw err;
  if (err.status === 429) reply.header('retry-after', '60');
  return reply.code(err.status).header('cache-control', 'no-store').send({ error: err.error, error_description: err.description });
}

function errStatus(err: unknown): number {
  if (err instanceof OAuthError) return err.status;
  throw err;
}

function esc(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function page(reply: FastifyReply, status: number, title: string, body: string) {
  return reply
    .code(status)
    .header('content-type', 'text/html; charset=utf-8')
    .header('cache-control', 'no-store')
    .header('x-frame-options', 'DENY')
    .header('content-security-policy', "default-src 'none'; style-src 'unsafe-inline'; form-action 'self' *; frame-ancestors 'none'")
    .send(
      `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width"><title>${esc(title)} · Keel</title>` +
        `<style>body{font-family:system-ui,sans-serif;max-width:28rem;margin:4rem auto;padding:0 1rem}label{display:block;margin:.6rem 0}input{width:100%;padding:.4rem}button{margin:.6rem .4rem 0 0;padding:.4rem 1rem}#error{color:#b00}</style>` +
        `</head><body><h1>${esc(title)}</h1>${body}</body></html>`,
    );
}

function devicePage(code: string, upstream: boolean): string {
  const credentials = upstream
    ? '<p>Allowing sends you to your identity provider to prove who you are.</p>'
    : '<label>Email <input name="email" type="email" autocomplete="username" required></label><label>Password <input name="password" type="password" autocomplete="current-password"></label>';
  return (
    `<form method="post" action="device"><label>Code shown by keel login <input name="user_code" value="${esc(code)}" autocomplete="off" required></label>` +
    `${credentials}<button name="action" value="allow" type="submit">Allow</button><button name="action" value="deny" type="submit" formnovalidate>Deny</button></form>`
  );
}

function authorizePage(q: Record<string, string>): string {
  const hidden = ['client_id', 'response_type', 'redirect_uri', 'code_challenge', 'code_challenge_method', 'state', 'org']
    .filter((k) => typeof q[k] === 'string')
    .map((k) => `<input type="hidden" name="${k}" value="${esc(q[k])}">`)
    .join('');
  return `<form method="post" action="authorize">${hidden}<label>Email <input name="email" type="email" autocomplete="username" required></label><label>Password <input name="password" type="password" autocomplete="current-password" required></label><button type="submit">Sign in</button></form>`;
}

function invitationPage(token: string, email: string, org: string): string {
  return (
    `<p>${esc(email)} is invited to org <b>${esc(org)}</b>.</p><form method="post" action="invitation"><input type="hidden" name="token" value="${esc(token)}">` +
    `<label>New password <input name="password" type="password" autocomplete="new-password" minlength="12" required></label><button type="submit">Set password</button></form>`
  );
}
