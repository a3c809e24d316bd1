// The environment of a replica's containers, as the hosted platform gives it (docs/runtime.md,
// "Environment"): the CPLN_* variables and PORT, the GVC's spec.env for a container with
// inheritEnv, then the container's own env, which wins. A value `cpln://secret/NAME[.KEY]` is
// the secret's value, given only when the workload's identity is granted `reveal` on it
// (reveal.ts); otherwise the replica does not start, and its message names the secret and the
// grant. `$(NAME)` in a value is replaced by an earlier variable's value, as Kubernetes does.
// Values are never logged: they go only into the container's config.json (0600, under the
// 0700 data directory).
import type { Authorizer } from '../auth/authorizer.js';
import type { Store } from '../store/types.js';
import { revealedSecret, secretFiles } from './reveal.js';
import type { DeploymentRef } from './types.js';

/** An environment value that cannot be given to the replica: the replica waits, with this as its message. */
export class EnvError extends Error {}

const SECRET = 'cpln://secret/';

export interface EnvInput {
  store: Store;
  auth: Authorizer;
  ref: DeploymentRef;
  replica: string;
  version: number;
  spec: Record<string, any>;
  /** The workload's canonical endpoint URL (CPLN_GLOBAL_ENDPOINT). */
  globalEndpoint: string;
  /** Keel's API as the replica reaches it (CPLN_ENDPOINT), when it does. */
  apiEndpoint?: string;
  /** The credential that acts as the workload's identity (CPLN_TOKEN), when it has one. */
  token?: string;
}

/** Each container's environment by container name, every reference resolved; EnvError when one cannot be. */
export async function containerEnvs(input: EnvInput): Promise<Map<string, Record<string, string>>> {
  const { store, ref, spec } = input;
  const gvc = await store.get({ org: ref.org, kind: 'gvc', gvc: '', name: ref.gvc });
  const location = await store.get({ org: ref.org, kind: 'location', gvc: '', name: ref.location });
  const gvcEnv = ((gvc?.data.spec as { env?: unknown } | undefined)?.env ?? []) as Array<{ name?: string; value?: string }>;
  const containers = ((spec.containers ?? []) as Array<Record<string, any>>).filter((c) => c && c.name);
  const port = firstPort(containers);
  const out = new Map<string, Record<string, string>>();
  for (const c of containers) {
    const env: Record<string, string> = {
      CPLN_ORG: ref.org,
      CPLN_GVC: ref.gvc,
      CPLN_GVC_ALIAS: typeof gvc?.data.alias === 'string' ? gvc.data.alias : ref.host.slice(ref.workload.length + 1),
      CPLN_LOCATION: ref.location,
      CPLN_PROVIDER: typeof location?.data.provider === 'string' ? location.data.provider : '',
      CPLN_WORKLOAD: `/org/${ref.org}/gvc/${ref.gvc}/workload/${ref.workload}`,
      CPLN_WORKLOAD_VERSION: String(input.version),
      CPLN_NAME: ref.workload,
      CPLN_IMAGE: String(c.image ?? ''),
      CPLN_REPLICA: input.replica,
      CPLN_GLOBAL_ENDPOINT: input.globalEndpoint,
      ...(input.apiEndpoint ? { CPLN_ENDPOINT: input.apiEndpoint } : {}),
      ...(input.token ? { CPLN_TOKEN: input.token } : {}),
      ...(port ? { PORT: String(port) } : {}),
    };
    const own = new Set(((c.env ?? []) as Array<{ name?: string }>).map((e) => e.name));
    const layers: Array<[string, Array<{ name?: string; value?: string }>]> = [];
    if (c.inheritEnv === true) layers.push(['the GVC', gvcEnv.filter((e) => !own.has(e.name))]);
    layers.push([`container ${c.name}`, c.env ?? []]);
    for (const [where, list] of layers) {
      for (const e of list) {
        if (typeof e?.name !== 'string' || e.name.toUpperCase().startsWith('CPLN_')) continue;
        env[e.name] = await valueOf(input, env, e.name, String(e.value ?? ''), where);
      }
    }
    out.set(String(c.name), env);
  }
  return out;
}

async function valueOf(input: EnvInput, env: Record<string, string>, name: string, value: string, where: string): Promise<string> {
  if (!value.startsWith(SECRET)) return value.replace(/\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)/g, (whole, ref: string) => env[ref] ?? whole);
  const [secretName, ...rest] = value.slice(SECRET.length).split('.');
  const key = rest.length ? rest.join('.') : undefined;
  const fail = (why: string) => new EnvError(`Environment variable ${name} of ${where}: ${why}`);
  const secret = await revealedSecret(input.store, input.auth, input.ref, input.spec, secretName);
  if (typeof secret === 'string') throw fail(secret);
  if (key === undefined) {
    // An opaque secret is its payload; any other type is its data as JSON, as the hosted platform gives it.
    if (secret.type === 'opaque') return text(secretFiles(secret, 'payload'), 'payload');
    return typeof secret.data === 'string' ? secret.data : JSON.stringify(secret.data ?? {});
  }
  const files = secretFiles(secret, key);
  if (typeof files === 'string') throw fail(`${files} (secret ${secretName})`);
  return text(files, key);
}

function text(files: Record<string, string | Buffer> | string, key: string): string {
  if (typeof files === 'string') return '';
  const v = files[key];
  return typeof v === 'string' ? v : v.toString('utf8');
}

/** The port the platform tells the workload to serve on: its first container's first port. */
export function firstPort(containers: Array<{ ports?: Array<{ number?: number }> }>): number | undefined {
  for (const c of containers) for (const p of c.ports ?? []) if (p.number) return Number(p.number);
  return undefined;
}
