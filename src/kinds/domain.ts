import { defineKind, standardPermissions } from './define.js';
import { linksAt } from './references.js';
import { ApiError } from '../errors.js';
import { arr, bool, dnsName, duration, int, link, map, num, obj, oneOf, readOnly, str } from './schema.js';

// Domain spec from the public types (types-ts domain.ts).

const TLS_VERSIONS = ['TLSV1_3', 'TLSV1_2', 'TLSV1_1', 'TLSV1_0'] as const;

const CIPHER_SUITES = [
  'ECDHE-ECDSA-AES256-GCM-SHA384', 'ECDHE-ECDSA-CHACHA20-POLY1305', 'ECDHE-ECDSA-AES128-GCM-SHA256', 'ECDHE-RSA-AES256-GCM-SHA384',
  'ECDHE-RSA-CHACHA20-POLY1305', 'ECDHE-RSA-AES128-GCM-SHA256', 'AES256-GCM-SHA384', 'AES128-GCM-SHA256', 'TLS_RSA_WITH_AES_256_GCM_SHA384',
  'TLS_RSA_WITH_AES_128_GCM_SHA256', 'TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256', 'TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384',
  'TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256', 'TLS_CHACHA20_POLY1305_SHA256', 'TLS_AES_256_GCM_SHA384', 'TLS_AES_128_GCM_SHA256', 'DES-CBC3-SHA',
  'ECDHE-RSA-AES128-SHA', 'ECDHE-RSA-AES256-SHA', 'AES128-SHA', 'AES256-SHA',
] as const;

const percent = () => num({ minimum: 0, maximum: 100 });
const portNumber = () => int({ minimum: 1, maximum: 65535 });

/** Another workload that receives a share of a route's traffic: a copy (mirror) or a weighted part (canary). */
const trafficShare = (share: 'percent' | 'weight') =>
  obj({ workloadLink: link(), [share]: percent(), port: portNumber() }, { required: ['workloadLink', share] });

const route = obj(
  {
    prefix: str({ maxLength: 1024 }),
    replacePrefix: str({ maxLength: 1024 }),
    regex: str({ maxLength: 1024 }),
    workloadLink: link(),
    port: portNumber(),
    hostPrefix: str({ maxLength: 253 }),
    hostRegex: str({ maxLength: 1024 }),
    headers: obj({ request: obj({ set: map(str({ maxLength: 4096 }), { maxProperties: 50 }) }) }),
    replica: int({ minimum: 0 }),
    mirror: arr(trafficShare('percent'), { maxItems: 10 }),
    canaries: arr(trafficShare('weight'), { maxItems: 10 }),
  },
  { required: ['workloadLink'] },
);

const port = obj({
  number: portNumber(),
  protocol: oneOf(['http', 'http2', 'tcp']),
  routes: arr(route, { maxItems: 150 }),
  cors: obj({
    allowOrigins: arr(obj({ exact: str({ maxLength: 1024 }), regex: str({ maxLength: 1024 }) }), { maxItems: 100 }),
    allowMethods: arr(str({ maxLength: 32 }), { maxItems: 20 }),
    allowHeaders: arr(str({ maxLength: 256 }), { maxItems: 100 }),
    exposeHeaders: arr(str({ maxLength: 256 }), { maxItems: 100 }),
    maxAge: duration(),
    allowCredentials: bool(),
  }),
  tls: obj({
    minProtocolVersion: oneOf(TLS_VERSIONS),
    cipherSuites: arr(oneOf(CIPHER_SUITES), { maxItems: 50 }),
    clientCertificate: obj({ secretLink: link() }),
    serverCertificate: obj({ secretLink: link() }),
  }),
});


const DOMAIN_STATES = ['initializing', 'ready', 'pendingDnsConfig', 'pendingCertificate', 'usedByGvc', 'warning'] as const;

// Status from the public types (DomainStatus), written by Keel's domain reconciler.
const status = obj({
  endpoints: arr(obj({ url: str(), workloadLink: str() })),
  status: oneOf(DOMAIN_STATES),
  warning: str(),
  locations: arr(obj({ name: str(), certificateStatus: oneOf(['initializing', 'ready', 'pendingDnsConfig', 'pendingCertificate', 'ignored']) })),
  fingerprint: str(),
  dnsConfig: arr(obj({ type: str(), ttl: int(), host: str(), value: str() })),
});

export default defineKind({
  kind: 'domain',
  scope: 'org',
  summary: 'A custom DNS domain routed to a GVC or to workloads, with its certificates.',
  // Domains are named by their DNS name (`app.example.com`).
  name: { ...dnsName(), minLength: 2 },
  fields: {
    spec: obj({
      dnsMode: oneOf(['cname', 'ns']),
      gvcLink: link(),
      workloadLink: link(),
      acceptAllHosts: bool(),
      acceptAllSubdomains: bool(),
      certChallengeType: oneOf(['http01', 'dns01']),
      ports: arr(port, { maxItems: 10 }),
    }),
    status: readOnly(status),
  },
  permissions: standardPermissions('domains'),
  // Routing traffic to a workload shows nothing of it and grants nothing over it, so `view` is
  // enough; serving a certificate reads the secret's value, so it takes `use`.
  references: (item) =>
    linksAt(item, [
      { at: 'spec.gvcLink', kind: 'gvc', permission: 'view' },
      { at: 'spec.workloadLink', kind: 'workload', permission: 'view' },
      ...['workloadLink', 'mirror[].workloadLink', 'canaries[].workloadLink'].map((at) => ({ at: `spec.ports[].routes[].${at}`, kind: 'workload', permission: 'view' })),
      ...['clientCertificate', 'serverCertificate'].map((at) => ({ at: `spec.ports[].tls.${at}.secretLink`, kind: 'secret', permission: 'use' })),
    ]),
  check(item) {
    // The canaries of a route share at most all of its traffic; the primary workload keeps the rest.
    const ports = ((item.spec as { ports?: unknown } | undefined)?.ports ?? []) as Array<{ routes?: Array<{ canaries?: Array<{ weight?: number }> }> }>;
    ports.forEach((p, i) =>
      (p.routes ?? []).forEach((r, j) => {
        const total = (r.canaries ?? []).reduce((sum, c) => sum + (c.weight ?? 0), 0);
        if (total > 100) {
          const path = `spec.ports[${i}].routes[${j}].canaries`;
          throw ApiError.badRequest(`${path}: the weights add up to ${total}; at most 100 is allowed`, [{ path, message: `weights must add up to at most 100 (they add up to ${total})` }]);
        }
      }),
    );
  },
});
