// A person signs in to the console through Keel's authorization server: authorization code with
// PKCE S256 as the public client keel-console, redirected back to the console's own URL. The
// verifier and state wait in this tab's sessionStorage while the browser is away.
const PENDING = 'keel.signin';

function base64url(bytes: Uint8Array): string {
  return btoa(String.fromCharCode(...bytes)).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

function redirectUri(): string {
  return `${location.origin}${location.pathname}`;
}

/** Sends the browser to Keel's sign-in page; `after` is the console route to open once signed in. */
export async function startPersonSignIn(after: string): Promise<void> {
  if (!crypto.subtle) throw new Error('Signing in needs a secure page: open the console over HTTPS or on localhost.');
  const verifier = base64url(crypto.getRandomValues(new Uint8Array(32)));
  const state = base64url(crypto.getRandomValues(new Uint8Array(16)));
  const challenge = base64url(new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier))));
  sessionStorage.setItem(PENDING, JSON.stringify({ verifier, state, after }));
  const params = new URLSearchParams({ client_id: 'keel-console', response_type: 'code', redirect_uri: redirectUri(), code_challenge: challenge, code_challenge_method: 'S256', state });
  location.assign(`/login/authorize?${params}`);
}

/**
 * When the page is Keel's redirect back (?code=…&state=…), trades the code for a token; the token
 * and the route to open, or undefined when this page load is no such return. Throws the refusal.
 */
export async function finishPersonSignIn(): Promise<{ token: string; after: string } | undefined> {
  const query = new URLSearchParams(location.search);
  const code = query.get('code');
  const pending = sessionStorage.getItem(PENDING);
  if (!code || !pending) return undefined;
  sessionStorage.removeItem(PENDING);
  history.replaceState(null, '', `${location.pathname}${location.hash}`);
  const { verifier, state, after } = JSON.parse(pending) as { verifier: string; state: string; after: string };
  if (query.get('state') !== state) throw new Error('The sign-in did not come back as it was sent (state differs); sign in again.');
  const res = await fetch('/login/token', {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'authorization_code', code, redirect_uri: redirectUri(), client_id: 'keel-console', code_verifier: verifier }),
  });
  const body = (await res.json().catch(() => ({}))) as { access_token?: string; error_description?: string };
  if (!res.ok || !body.access_token) throw new Error(`Sign-in failed: ${body.error_description ?? res.status}`);
  return { token: body.access_token, after };
}
