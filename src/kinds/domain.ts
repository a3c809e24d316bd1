import { defineKind, standardPermissions } from './define.js';
import { anyObject, arr, bool, int, link, obj, oneOf, readOnly, str } from './schema.js';

// Domain spec from the public types (types-ts domain.ts).

const TLS_VERSIONS = ['TLSV1_2', 'TLSV1_1', 'TLSV1_0'] as const;

const route = obj(
  {
    prefix: str({ maxLength: 1024 }),
    replacePrefix: str({ maxLength: 1024 }),
    regex: str({ maxLength: 1024 }),
    workloadLink: link(),
    port: int({ minimum: 1, maximum: 65535 }),
    hostPrefix: str({ maxLength: 253 }),
    hostRegex: str({ maxLength: 1024 }),
    headers: anyObject(),
    replica: int({ minimum: 0 }),
    mirror: arr(anyObject(), { maxItems: 10 }),
  },
  { required: ['workloadLink'] },
);

const port = obj({
  number: int({ minimum: 1, maximum: 65535 }),
  protocol: oneOf(['http', 'http2', 'tcp']),
  routes: arr(route, { maxItems: 150 }),
  cors: obj({
    allowOrigins: arr(obj({ exact: str({ maxLength: 1024 }), regex: str({ maxLength: 1024 }) }), { maxItems: 100 }),
    allowMethods: arr(str({ maxLength: 32 }), { maxItems: 20 }),
    allowHeaders: arr(str({ maxLength: 256 }), { maxItems: 100 }),
    exposeHeaders: arr(str({ maxLength: 256 }), { maxItems: 100 }),
    maxAge: str({ maxLength: 32 }),
    allowCredentials: bool(),
  }),
  tls: obj({
    minProtocolVersion: oneOf(TLS_VERSIONS),
    cipherSuites: arr(str({ maxLength: 128 }), { maxItems: 50 }),
    clientCertificate: obj({ secretLink: link() }),
    serverCertificate: obj({ secretLink: link() }),
  }),
});

/** Domains are named by their DNS name (`app.example.com`): lowercase labels of 1-63 characters joined by dots. */
export const DOMAIN_NAME_PATTERN = '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$';

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
  name: str({ minLength: 2, maxLength: 253, pattern: DOMAIN_NAME_PATTERN }),
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
});
