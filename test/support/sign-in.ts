// Steps of signing a person in, as a browser's forms and keel login send them.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import type { TestKeel } from './keel.js';

const CLI = join(import.meta.dirname, '..', '..', 'src', 'cli.ts');

export const PASSWORD = 'correct horse battery';

export async function form(url: string, fields: Record<string, string>): Promise<{ status: number; text: string; json: any; location: string | null }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams(fields), redirect: 'manual' });
  const text = await res.text();
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, text, json, location: res.headers.get('location') };
}

/** Invites the email through the API as the org's admin and sets its password through the link. */
export async function invitedWithPassword(keel: TestKeel, email: string, password = PASSWORD): Promise<string> {
  const base = await keel.listen();
  const invited = await fetch(`${base}/org/${keel.org}/user/-invite`, { method: 'POST', headers: { authorization: `Bearer ${keel.token}`, 'content-type': 'application/json' }, body: JSON.stringify({ email }) });
  const body = (await invited.json()) as Record<string, unknown>;
  assert.equal(invited.status, 201, JSON.stringify(body));
  const link = String(body.inviteLink);
  assert.ok(link.startsWith(`${base}/login/invitation?token=`), link);
  const page = await fetch(link);
  assert.equal(page.status, 200);
  assert.match(await page.text(), new RegExp(`${email.replace('.', '\\.')} is invited to org <b>${keel.org}</b>`));
  const set = await form(new URL('/login/invitation', link).href, { token: new URL(link).searchParams.get('token')!, password });
  assert.equal(set.status, 200, set.text);
  return link;
}

/** Starts a device sign-in as keel-cli. */
export async function startDevice(base: string, org?: string) {
  const res = await form(`${base}/login/device/code`, { client_id: 'keel-cli', ...(org ? { org } : {}) });
  assert.equal(res.status, 200, res.text);
  return res.json as { device_code: string; user_code: string; verification_uri: string; verification_uri_complete: string; expires_in: number; interval: number };
}

export const poll = (base: string, deviceCode: string) => form(`${base}/login/token`, { grant_type: 'urn:ietf:params:oauth:grant-type:device_code', device_code: deviceCode, client_id: 'keel-cli' });


/** Runs `keel ARGS` with the cpln CLI's home; `onStdout` sees its output as it comes. */
export function keelCli(args: string[], cplnHome: string, onStdout?: (out: string) => void): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', CLI, ...args], { env: { ...process.env, CPLN_HOME: cplnHome, DISPLAY: '', WAYLAND_DISPLAY: '' }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    const timer = setTimeout(() => child.kill('SIGKILL'), 120_000);
    child.stdout.on('data', (c) => {
      stdout += c;
      onStdout?.(stdout);
    });
    child.stderr.on('data', (c) => (stderr += c));
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

