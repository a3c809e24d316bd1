// A secret as a workload's replica may have it: only when the workload's identity is granted
// `reveal` on it by the org's policies, evaluated as for any request (by link, `all` or
// targetQuery). Volumes (volumes.ts) and environment values (env.ts) read secrets through here.
import type { Authorizer } from '../auth/authorizer.js';
import { findKind } from '../kinds/index.js';
import { parseLink } from '../resources/links.js';
import { targetOf } from '../resources/service.js';
import type { Store } from '../store/types.js';
import type { DeploymentRef } from './types.js';

/** The stored secret `name` when the workload's identity may reveal it; else why not (it names the secret and the grant). */
export async function revealedSecret(
  store: Store,
  auth: Authorizer,
  ref: Pick<DeploymentRef, 'org' | 'gvc'>,
  spec: Record<string, any>,
  name: string,
): Promise<Record<string, unknown> | string> {
  const secret = await store.get({ org: ref.org, kind: 'secret', gvc: '', name });
  if (!secret) return `secret ${name} does not exist in org ${ref.org}`;
  const identity = typeof spec.identityLink === 'string' ? parseLink(spec.identityLink) : undefined;
  if (!identity || identity.kind !== 'identity' || identity.org !== ref.org || identity.gvc !== ref.gvc) {
    return `the workload has no identity of GVC ${ref.gvc}: secret ${name} is given only to an identity granted reveal on it`;
  }
  if (!(await store.get({ org: ref.org, kind: 'identity', gvc: ref.gvc, name: identity.name }))) return `identity ${identity.name} does not exist in GVC ${ref.gvc}`;
  const report = await auth.accessReport(findKind('secret')!, targetOf(secret));
  const identityLink = `/org/${ref.org}/gvc/${ref.gvc}/identity/${identity.name}`;
  if (!(report.get('reveal') ?? []).some((entry) => entry.principalLink === identityLink || entry.principalLink === spec.identityLink)) {
    return `identity ${identity.name} is not granted reveal on secret ${name} (a policy must grant it)`;
  }
  return secret.data;
}

const FILE_NAME = /^[-_.A-Za-z0-9]{1,253}$/;

/**
 * The files a secret becomes: an opaque secret's payload as `payload` (values decoded when the
 * secret's encoding is base64), data given as a string (the JSON document types) as `payload`, and one file per field of the others (a
 * dictionary's keys, tls's key/cert/chain, …). With `key`, that one file. A string: why not.
 */
export function secretFiles(item: Record<string, unknown>, key: string | undefined): Record<string, string | Buffer> | string {
  const data = item.data;
  const files: Record<string, string | Buffer> = {};
  if (typeof data === 'string') files.payload = data;
  else if (data && typeof data === 'object') {
    const record = data as Record<string, unknown>;
    // A dictionary's `encoding` is a key like any other; elsewhere it says how the values are written.
    const base64 = item.type !== 'dictionary' && record.encoding === 'base64';
    for (const [name, value] of Object.entries(record)) {
      if (name === 'encoding' && item.type !== 'dictionary') continue;
      const text = typeof value === 'string' ? value : JSON.stringify(value);
      files[name] = base64 && typeof value === 'string' ? Buffer.from(value, 'base64') : text;
    }
  }
  if (item.type === 'opaque') files.payload ??= '';
  if (key !== undefined) {
    if (!Object.hasOwn(files, key)) return `secret has no key ${key}`;
    return { [key]: files[key] };
  }
  const unsafe = Object.keys(files).find((name) => !FILE_NAME.test(name) || /^\.+$/.test(name));
  if (unsafe !== undefined) return `the secret's key '${unsafe}' is not a file name (letters, digits, '-', '_' and '.')`;
  return files;
}

