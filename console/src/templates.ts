// Starting points for "create": the common fields of every kind, plus a usable spec for the kinds
// whose create needs more than a name. Any kind without an entry gets the common fields only.

const SECRET_DATA: Record<string, unknown> = {
  opaque: { payload: 'change me', encoding: 'plain' },
  dictionary: { KEY: 'value' },
  userpass: { username: 'user', password: 'change me', encoding: 'plain' },
  keypair: { secretKey: '-----BEGIN PRIVATE KEY-----\n…\n-----END PRIVATE KEY-----', publicKey: '' },
  tls: { key: '-----BEGIN PRIVATE KEY-----\n…', cert: '-----BEGIN CERTIFICATE-----\n…', chain: '' },
  aws: { accessKey: 'AKIA…', secretKey: 'change me', roleArn: '' },
  ecr: { accessKey: 'AKIA…', secretKey: 'change me', repos: ['123456789012.dkr.ecr.us-east-1.amazonaws.com/app'] },
  gcp: '{"type": "service_account", "project_id": "my-project"}',
  docker: '{"auths": {"registry.example.com": {"auth": "dXNlcjpwYXNz"}}}',
  'azure-sdk': '{"subscriptionId": "…", "tenantId": "…", "clientId": "…", "clientSecret": "…"}',
  'azure-connector': { url: 'https://example.azurewebsites.net', code: 'change me' },
  'nats-account': { accountId: 'A…', privateKey: 'S…' },
};

const SPECS: Record<string, (org: string) => Record<string, unknown>> = {
  gvc: (org) => ({ spec: { staticPlacement: { locationLinks: [`/org/${org}/location/aws-us-east-2`] } } }),
  workload: () => ({
    spec: {
      type: 'standard',
      containers: [{ name: 'main', image: 'nginx:latest', cpu: '50m', memory: '128Mi', ports: [{ number: 80, protocol: 'http' }] }],
      defaultOptions: { autoscaling: { metric: 'disabled', minScale: 1, maxScale: 1 }, capacityAI: false },
      firewallConfig: { external: { inboundAllowCIDR: ['0.0.0.0/0'] } },
    },
  }),
  policy: () => ({ targetKind: 'workload', targetLinks: [], bindings: [{ permissions: ['view'], principalLinks: [] }] }),
  group: () => ({ memberLinks: [] }),
  domain: () => ({ spec: { dnsMode: 'cname', ports: [{ number: 443, protocol: 'http2', routes: [] }] } }),
  volumeset: () => ({ spec: { initialCapacity: 10, performanceClass: 'general-purpose-ssd', fileSystemType: 'ext4' } }),
  ipset: () => ({ spec: { locations: [] } }),
  auditctx: () => ({}),
};

export function templateTypes(kind: string): string[] {
  return kind === 'secret' ? Object.keys(SECRET_DATA) : [];
}

export function templateOf(kind: string, type: string, org: string): Record<string, unknown> {
  const common = { kind, name: `new-${kind}`, tags: {} };
  if (kind === 'secret') return { ...common, type, data: SECRET_DATA[type] };
  return { ...common, ...(SPECS[kind]?.(org) ?? {}) };
}
