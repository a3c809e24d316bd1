// The official cpln CLI's profiles, as its ProfileManager keeps them: $CPLN_HOME, else
// $XDG_CONFIG_HOME/cpln, else ~/.config/cpln; each profile in profiles/NAME.json, the default's
// name in profiles/default. A token goes in request.token, as `cpln profile update --token` puts
// it (never authInfo, which the CLI would try to refresh at the hosted service).
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';

export function profilesDir(env: NodeJS.ProcessEnv = process.env): string {
  const root = env.CPLN_HOME || (env.XDG_CONFIG_HOME ? join(env.XDG_CONFIG_HOME, 'cpln') : join(env.HOME || homedir(), '.config', 'cpln'));
  return join(root, 'profiles');
}

export function checkProfileName(name: string): string {
  if (!/^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/.test(name)) throw new Error(`'${name}' is not a profile name (letters, digits, '.', '_' and '-')`);
  return name;
}

export function readProfile(name: string, env: NodeJS.ProcessEnv = process.env): Record<string, any> | undefined {
  const file = join(profilesDir(env), `${checkProfileName(name)}.json`);
  return existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as Record<string, any>) : undefined;
}

/** The profile's name the CLI would pick without --profile: CPLN_PROFILE, the default file, else the only one. */
export function defaultProfileName(env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (env.CPLN_PROFILE) return env.CPLN_PROFILE;
  const file = join(profilesDir(env), 'default');
  return existsSync(file) ? readFileSync(file, 'utf8').trim() || undefined : undefined;
}

/** Writes (or updates) a profile holding the token; it becomes the default when there is none. */
export function writeProfile(name: string, values: { endpoint: string; org: string; token: string }, env: NodeJS.ProcessEnv = process.env): string {
  const dir = profilesDir(env);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const existing = readProfile(name, env) ?? {};
  const profile = {
    ...existing,
    name,
    context: { ...(existing.context ?? {}), org: values.org },
    request: { insecure: false, timeout: 30, ...(existing.request ?? {}), endpoint: values.endpoint, token: values.token },
    format: existing.format ?? { color: true, max: 50, output: 'text', ts: 'age' },
  };
  delete (profile as Record<string, unknown>).authInfo;
  const file = join(dir, `${name}.json`);
  writeFileSync(file, JSON.stringify(profile, null, 2), { mode: 0o600 });
  if (!existsSync(join(dir, 'default'))) writeFileSync(join(dir, 'default'), name);
  return file;
}

/** Removes the profile (and the default's name when it was this one); false when there was none. */
export function removeProfile(name: string, env: NodeJS.ProcessEnv = process.env): boolean {
  const dir = profilesDir(env);
  const file = join(dir, `${checkProfileName(name)}.json`);
  if (!existsSync(file)) return false;
  rmSync(file);
  const defaultFile = join(dir, 'default');
  if (existsSync(defaultFile) && readFileSync(defaultFile, 'utf8').trim() === name) rmSync(defaultFile);
  return true;
}
