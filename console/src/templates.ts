// Starting points for "create": the common fields of every kind, plus a usable spec for the kinds
// whose create needs more than a name. Any kind without an entry gets the common fields only.
// Secrets have a form per type instead (secret-form.tsx).

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

export function templateOf(kind: string, org: string): Record<string, unknown> {
  const common = { kind, name: `new-${kind}`, tags: {} };
  return { ...common, ...(SPECS[kind]?.(org) ?? {}) };
}
