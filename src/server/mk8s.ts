// What the clients read from a managed Kubernetes cluster besides the item itself:
//   GET  /org/{org}/mk8s/{name}/-cacerts     {cacerts: PEM}   the cluster's certificate authority
//   POST /org/{org}/mk8s/{name}/-join        {script}         a node join script (body: options)
//   POST /org/{org}/mk8s/{name}/-cloudinit   {script}         the same as cloud-init user data
// `cpln mk8s kubeconfig` and Terraform's cpln_mk8s_kubeconfig build a kubeconfig from the CA,
// status.serverUrl and the cluster's alias; `cpln mk8s join` prints the script. The CA is a real
// self-signed Ed25519 certificate, stable for the cluster. Keel simulates clusters and runs no
// Kubernetes, so the join scripts say so and exit non-zero instead of configuring the machine.
import { createHash, createPrivateKey, createPublicKey, sign } from 'node:crypto';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Authorizer } from '../auth/authorizer.js';
import { ApiError } from '../errors.js';
import { findKind } from '../kinds/index.js';
import { targetOf } from '../resources/service.js';
import type { Store, StoredItem } from '../store/types.js';

type Params = { org: string; name: string };

export function mountMk8s(app: FastifyInstance, store: Store, auth: Authorizer): void {
  const def = findKind('mk8s')!;
  async function cluster(request: FastifyRequest, permission: string): Promise<StoredItem> {
    const { org, name } = request.params as Params;
    await auth.requireMember(request.principal, org);
    const item = await store.get({ org, kind: 'mk8s', gvc: '', name });
    if (!item) throw ApiError.notFound(`mk8s '${name}' not found`);
    await auth.check(request.principal, permission, def, targetOf(item));
    return item;
  }

  app.get('/org/:org/mk8s/:name/-cacerts', async (request) => ({ cacerts: caCertificate(await cluster(request, 'view')) }));
  for (const kind of ['join', 'cloudinit'] as const) {
    app.post(`/org/:org/mk8s/:name/-${kind}`, async (request) => {
      const item = await cluster(request, 'edit');
      const options = joinOptions(item, request.body);
      return { script: kind === 'join' ? joinScript(item, options) : cloudInit(joinScript(item, options)) };
    });
  }
}

/** The join options (`--options key=value`): a map of short strings; a node pool must be one of the cluster's. */
function joinOptions(item: StoredItem, body: unknown): Record<string, string> {
  if (body === undefined || body === null || body === '') return {};
  if (typeof body !== 'object' || Array.isArray(body)) throw ApiError.badRequest('the body must be an object of join options, such as {"nodepool": "workers"}');
  const entries = Object.entries(body as Record<string, unknown>);
  if (entries.length > 20) throw ApiError.badRequest('at most 20 join options', [{ path: '', message: 'has more than 20 options' }]);
  const out: Record<string, string> = {};
  for (const [key, value] of entries) {
    if (!/^[A-Za-z][A-Za-z0-9_.-]{0,62}$/.test(key) || typeof value !== 'string' || value.length > 253) {
      throw ApiError.badRequest(`join option '${key.slice(0, 64)}' must be a name with a string value of at most 253 characters`, [{ path: key.slice(0, 64), message: 'is not a valid option' }]);
    }
    out[key] = value;
  }
  if (out.nodepool !== undefined) {
    const provider = Object.values(((item.data.spec as { provider?: Record<string, { nodePools?: Array<{ name?: string }> }> } | undefined)?.provider ?? {}))[0];
    const pools = (provider?.nodePools ?? []).map((p) => String(p.name));
    if (!pools.includes(out.nodepool)) {
      throw ApiError.badRequest(`mk8s '${item.name}' has no node pool '${out.nodepool}'${pools.length ? ` (its pools: ${pools.join(', ')})` : ''}`, [{ path: 'nodepool', message: 'is not a node pool of the cluster' }]);
    }
  }
  return out;
}

function joinScript(item: StoredItem, options: Record<string, string>): string {
  const what = `mk8s cluster '${item.name}' of org '${item.org}'${options.nodepool ? ` (node pool '${options.nodepool}')` : ''}`;
  return [
    '#!/bin/sh',
    `# Joins this machine to ${what}.`,
    '# Served by Keel, which simulates managed clusters: there is no control plane to join.',
    `echo "Keel simulates ${what}; there is no control plane to join, so this machine was left unchanged." >&2`,
    'exit 1',
    '',
  ].join('\n');
}

function cloudInit(script: string): string {
  return ['#cloud-config', 'write_files:', '  - path: /var/lib/keel/join.sh', "    permissions: '0755'", '    content: |', ...script.trimEnd().split('\n').map((l) => `      ${l}`), 'runcmd:', '  - [sh, /var/lib/keel/join.sh]', ''].join('\n');
}

// A minimal DER writer: enough for one self-signed certificate.
const der = (tag: number, ...parts: Buffer[]): Buffer => {
  const body = Buffer.concat(parts);
  const n = body.length;
  const len = n < 0x80 ? Buffer.from([n]) : n < 0x100 ? Buffer.from([0x81, n]) : Buffer.from([0x82, n >> 8, n & 0xff]);
  return Buffer.concat([Buffer.from([tag]), len, body]);
};
const seq = (...parts: Buffer[]) => der(0x30, ...parts);
const oid = (hex: string) => der(0x06, Buffer.from(hex, 'hex'));
const utf8 = (s: string) => der(0x0c, Buffer.from(s, 'utf8'));
const time = (ms: number) => der(0x18, Buffer.from(new Date(ms).toISOString().replace(/[-:T]/g, '').slice(0, 14) + 'Z', 'ascii'));
const ED25519 = '2b6570';
const COMMON_NAME = '550403';
const BASIC_CONSTRAINTS = '551d13';
const KEY_USAGE = '551d0f';

/**
 * The cluster's CA: a self-signed Ed25519 certificate (CA, certificate and CRL signing) whose
 * key comes from the cluster's id, so every read answers the same certificate.
 */
export function caCertificate(item: StoredItem): string {
  const seed = createHash('sha256').update(`keel-mk8s-ca\u0000${item.id}`).digest();
  const key = createPrivateKey({ key: Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), seed]), format: 'der', type: 'pkcs8' });
  const spki = createPublicKey(key).export({ format: 'der', type: 'spki' });
  const algorithm = seq(oid(ED25519));
  const name = seq(der(0x31, seq(oid(COMMON_NAME), utf8(`${item.org}/${item.name}`.slice(0, 64)))));
  const created = Date.parse(item.created);
  const serial = Buffer.concat([Buffer.from([0x01]), seed.subarray(0, 15)]);
  const extensions = der(
    0xa3,
    seq(
      seq(oid(BASIC_CONSTRAINTS), der(0x01, Buffer.from([0xff])), der(0x04, seq(der(0x01, Buffer.from([0xff]))))),
      seq(oid(KEY_USAGE), der(0x01, Buffer.from([0xff])), der(0x04, der(0x03, Buffer.from([0x01, 0x86])))),
    ),
  );
  const tbs = seq(der(0xa0, der(0x02, Buffer.from([0x02]))), der(0x02, serial), algorithm, name, seq(time(created), time(created + 10 * 365 * 86_400_000)), name, spki, extensions);
  const signature = sign(null, tbs, key);
  const cert = seq(tbs, algorithm, der(0x03, Buffer.from([0x00]), signature));
  return `-----BEGIN CERTIFICATE-----\n${cert.toString('base64').replace(/(.{64})/g, '$1\n').trimEnd()}\n-----END CERTIFICATE-----\n`;
}
