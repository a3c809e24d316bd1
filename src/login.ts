// `keel login`: the device authorization grant (RFC 8628) against a Keel, as client keel-cli.
import { spawn } from 'node:child_process';

export interface LoginResult {
  token: string;
  org: string;
  email: string;
}

interface DeviceAnswer {
  device_code: string;
  user_code: string;
  verification_uri: string;
  verification_uri_complete: string;
  expires_in: number;
  interval: number;
}

/** Signs in at `endpoint`; `say` gets the lines for the person (URL and code). */
export async function deviceLogin(endpoint: string, org: string | undefined, say: (line: string) => void): Promise<LoginResult> {
  const start = await post(`${endpoint}/login/device/code`, { client_id: 'keel-cli', ...(org ? { org } : {}) });
  if (start.status !== 200) throw new Error(`${endpoint} refused to start a sign-in: ${describe(start.body)}`);
  const device = start.body as unknown as DeviceAnswer;
  say(`Open ${device.verification_uri} and enter the code ${device.user_code}`);
  say(`(or open ${device.verification_uri_complete})`);
  openBrowser(device.verification_uri_complete);
  let interval = device.interval || 5;
  const deadline = Date.now() + device.expires_in * 1000;
  while (Date.now() < deadline + interval * 1000) {
    await new Promise((resolve) => setTimeout(resolve, interval * 1000));
    const answer = await post(`${endpoint}/login/token`, { grant_type: 'urn:ietf:params:oauth:grant-type:device_code', device_code: device.device_code, client_id: 'keel-cli' });
    if (answer.status === 200) return { token: String(answer.body.access_token), org: String(answer.body.org), email: String(answer.body.email) };
    const error = answer.body.error;
    if (error === 'authorization_pending') continue;
    if (error === 'slow_down') {
      interval += 5;
      continue;
    }
    throw new Error(`sign-in failed: ${describe(answer.body)}`);
  }
  throw new Error('sign-in failed: the code expired before it was confirmed');
}

async function post(url: string, form: Record<string, string>): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' }, body: new URLSearchParams(form), signal: AbortSignal.timeout(30_000) });
  const body = (await res.json().catch(() => ({}))) as Record<string, unknown>;
  return { status: res.status, body };
}

function describe(body: Record<string, unknown>): string {
  return String(body.error_description ?? body.message ?? body.error ?? 'no reason given');
}

/** Opens the page in a browser when this session has a display; the printed URL serves otherwise. */
function openBrowser(url: string): void {
  const command = process.platform === 'darwin' ? 'open' : process.platform === 'win32' ? 'explorer' : process.env.DISPLAY || process.env.WAYLAND_DISPLAY ? 'xdg-open' : undefined;
  if (!command) return;
  try {
    const child = spawn(command, [url], { stdio: 'ignore', detached: true });
    child.on('error', () => {});
    child.unref();
  } catch {
    // the printed URL is enough
  }
}
