// The status shapes of the public type definitions (controlplane-com/types-ts, src/interfaces),
// written down field by field as the types declare them, and a checker that reports every place
// a response differs: a field of the wrong type, a required field missing, a field the type
// does not declare (unless the type is open: an index signature or `any`).

type Spec =
  | 'string'
  | 'number'
  | 'boolean'
  | 'date'
  | 'any'
  | { enum: readonly string[] }
  | { ref: string }
  | { array: Spec }
  | { map: Spec };

interface Shape {
  fields: Record<string, Spec>;
  required?: string[];
  /** An index signature: fields beyond `fields` are allowed (and unchecked). */
  open?: boolean;
}

const str = 'string' as const;
const num = 'number' as const;
const bool = 'boolean' as const;
const date = 'date' as const;
const any = 'any' as const;
const ref = (name: string) => ({ ref: name });
const array = (of: Spec) => ({ array: of });
const map = (of: Spec) => ({ map: of });

export const PUBLIC_TYPES: Record<string, Shape> = {
  // deployment.ts
  DeploymentStatus: {
    fields: {
      endpoint: str,
      remote: str,
      lastProcessedVersion: num,
      expectedDeploymentVersion: num,
      internal: any,
      ready: bool,
      deploying: bool,
      versions: array(ref('DeploymentVersion')),
      jobExecutions: array(ref('JobExecutionStatus')),
      message: str,
    },
  },
  DeploymentVersion: {
    fields: { name: str, created: date, workload: num, gvc: num, containers: map(ref('ContainerStatus')), ready: bool, message: str, zone: str },
  },
  // containerstatus.ts
  ContainerStatus: {
    fields: { name: str, image: str, ready: bool, resources: ref('DeploymentResources'), message: str, restarts: ref('ContainerRestarts') },
  },
  ContainerRestarts: { fields: { lastRestartTime: date, exitCode: num, reason: str, count: num } },
  DeploymentResources: { fields: { replicas: num, replicasReady: num, cpu: num, memory: num } },
  // cronjob.ts
  JobExecutionStatus: {
    fields: {
      workloadVersion: num,
      status: { enum: ['successful', 'failed', 'active', 'pending', 'invalid', 'removed', ''] },
      startTime: date,
      completionTime: date,
      conditions: array(ref('JobExecutionCondition')),
      name: str,
      replica: str,
      containers: map(ref('ContainerStatus')),
    },
    required: ['workloadVersion', 'name'],
  },
  JobExecutionCondition: {
    fields: { status: str, type: str, lastDetectionTime: date, lastTransitionTime: date, message: str, reason: str },
    required: ['type'],
  },
  // command.ts
  Command: {
    fields: {
      // Not in the public type: Keel also names a command by its id, as every other item is named.
      name: str,
      id: str,
      ownerId: str,
      kind: str,
      version: num,
      created: date,
      lastModified: date,
      links: array(ref('Link')),
      tags: map(any),
      type: str,
      lifecycleStage: { enum: ['pending', 'running', 'cancelled', 'completed', 'failed'] },
      spec: map(any),
      status: map(any),
    },
    required: ['type'],
  },
  Link: { fields: { rel: str, href: str }, required: ['rel', 'href'] },
  // workload.ts (WorkloadStatus has an index signature: Keel's ready/readyLatest are allowed)
  WorkloadStatus: {
    fields: {
      parentId: str,
      canonicalEndpoint: str,
      endpoint: str,
      internalName: str,
      replicaInternalNames: array(str),
      healthCheck: ref('HealthCheckStatus'),
      currentReplicaCount: num,
      resolvedImages: ref('ResolvedImages'),
      loadBalancer: array(ref('LoadBalancerStatus')),
      suspendedStatus: { enum: ['notSuspended', 'partiallySuspended', 'suspended'] },
    },
    open: true,
  },
  HealthCheckStatus: { fields: { active: bool, success: bool, code: num, message: str, failures: num, successes: num, lastChecked: date }, required: ['active'] },
  ResolvedImages: { fields: { resolvedForVersion: num, resolvedAt: date, errorMessages: array(str), nextRetryAt: date, images: array(ref('ResolvedImage')) } },
  ResolvedImage: { fields: { digest: str, manifests: array(ref('ResolvedImageManifest')) } },
  ResolvedImageManifest: { fields: { image: str, mediaType: str, digest: str, platform: map(any) } },
  LoadBalancerStatus: { fields: { origin: str, url: str } },
  // org.ts
  OrgStatus: { fields: { accountLink: str, active: bool, endpointPrefix: str } },
  // identity.ts
  IdentityStatus: { fields: { objectName: str, aws: ref('IdentityCloudStatus'), gcp: ref('IdentityCloudStatus'), azure: ref('IdentityCloudStatus') } },
  IdentityCloudStatus: { fields: { lastError: str, usable: bool } },
  // cloudaccount.ts
  CloudAccountStatus: { fields: { usable: bool, lastChecked: date, lastError: str } },
  // ipSet.ts
  IpSetStatus: { fields: { ipAddresses: array(ref('IpAddress')), error: str, warning: str } },
  IpAddress: { fields: { name: str, ip: str, id: str, state: { enum: ['bound', 'unbound'] }, created: date }, required: ['name', 'ip', 'id', 'state', 'created'] },
  // volumeSet.ts
  VolumeSetStatus: { fields: { parentId: str, usedByWorkload: str, workloadLinks: array(str), bindingId: str, locations: array(ref('VolumeSetStatusLocation')) } },
  VolumeSetStatusLocation: { fields: { name: str, volumes: array(map(any)), desiredVolumeCount: num, clusterId: str }, required: ['name'] },
  // agent.ts
  AgentStatus: { fields: { bootstrapConfig: ref('BootstrapConfig'), protocolVersion: { enum: ['v1', 'v2'] } } },
  BootstrapConfig: {
    fields: { registrationToken: str, agentId: str, agentLink: str, hubEndpoint: str, protocolVersion: { enum: ['v1', 'v2'] } },
    required: ['registrationToken', 'agentId', 'agentLink', 'hubEndpoint'],
  },
  // mk8s.ts, mk8sAddons.ts
  Mk8sStatus: { fields: { oidcProviderUrl: str, serverUrl: str, homeLocation: str, addOns: ref('Mk8sAddOnsStatus') } },
  // The add-ons with a status type (the Terraform provider adds headlamp and the AWS ones); others report none.
  Mk8sAddOnsStatus: {
    fields: {
      dashboard: ref('DashboardAddonStatus'),
      headlamp: ref('DashboardAddonStatus'),
      awsWorkloadIdentity: ref('AwsWorkloadIdentityAddonStatus'),
      metrics: ref('MetricsAddonStatus'),
      logs: ref('LogsAddonStatus'),
    },
    open: true,
  },
  DashboardAddonStatus: { fields: { url: str } },
  AwsWorkloadIdentityAddonStatus: { fields: { oidcProviderConfig: ref('OidcProviderConfig'), trustPolicy: map(any) } },
  OidcProviderConfig: { fields: { providerUrl: str, audience: str } },
  MetricsAddonStatus: { fields: { prometheusEndpoint: str, remoteWriteConfig: map(any) } },
  LogsAddonStatus: { fields: { lokiAddress: str } },
  // location.ts
  LocationStatus: { fields: { geo: ref('Geo'), ipRanges: array(str) } },
  Geo: { fields: { lat: num, lon: num, country: str, state: str, city: str, continent: str } },
  // domain.ts
  DomainStatus: {
    fields: {
      endpoints: array(ref('DomainEndpoint')),
      status: { enum: ['initializing', 'ready', 'pendingDnsConfig', 'pendingCertificate', 'usedByGvc', 'warning', 'created', 'updated', 'deleted', 'errored', 'ignored'] },
      warning: str,
      locations: array(ref('DomainLocation')),
      fingerprint: str,
      dnsConfig: array(ref('DnsConfigRecord')),
    },
  },
  DomainEndpoint: { fields: { url: str, workloadLink: str }, required: ['url'] },
  DomainLocation: { fields: { name: str, certificateStatus: { enum: ['initializing', 'ready', 'pendingDnsConfig', 'pendingCertificate', 'ignored'] } }, required: ['name'] },
  DnsConfigRecord: { fields: { type: str, ttl: num, host: str, value: str } },
  // spicedb.ts
  SpicedbClusterStatus: { fields: { externalEndpoint: str }, open: true },
  // `messages` is not in this one type, but in every other command status: Keel reports progress the same way for all.
  RunCronWorkloadStatus: { fields: { replica: str, clusterIdByLocation: map(str), minimumWorkloadVersion: num, messages: array(str) } },
};

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;

/** Every difference between `value` and the public type `type`, as `path: problem` lines. */
export function mismatches(value: unknown, type: string, path = type): string[] {
  return check(value, { ref: type }, path);
}

function check(value: unknown, spec: Spec, path: string): string[] {
  if (spec === 'any') return [];
  if (spec === 'string' || spec === 'number' || spec === 'boolean') {
    return typeof value === spec && (spec !== 'number' || Number.isFinite(value)) ? [] : [`${path}: expected ${spec}, got ${JSON.stringify(value)}`];
  }
  if (spec === 'date') return typeof value === 'string' && ISO.test(value) ? [] : [`${path}: expected an ISO date, got ${JSON.stringify(value)}`];
  if ('enum' in spec) return spec.enum.includes(value as string) ? [] : [`${path}: expected one of ${spec.enum.join('|')}, got ${JSON.stringify(value)}`];
  if ('array' in spec) {
    if (!Array.isArray(value)) return [`${path}: expected an array, got ${JSON.stringify(value)}`];
    return value.flatMap((v, i) => check(v, spec.array, `${path}[${i}]`));
  }
  if (!value || typeof value !== 'object' || Array.isArray(value)) return [`${path}: expected an object, got ${JSON.stringify(value)}`];
  const obj = value as Record<string, unknown>;
  if ('map' in spec) return Object.entries(obj).flatMap(([k, v]) => check(v, spec.map, `${path}.${k}`));
  const shape = PUBLIC_TYPES[spec.ref];
  if (!shape) throw new Error(`no public type ${spec.ref}`);
  const out: string[] = [];
  for (const name of shape.required ?? []) if (obj[name] === undefined) out.push(`${path}.${name}: required by ${spec.ref}, missing`);
  for (const [name, v] of Object.entries(obj)) {
    const field = shape.fields[name];
    if (field === undefined) {
      if (!shape.open) out.push(`${path}.${name}: not a field of ${spec.ref}`);
      continue;
    }
    if (v !== undefined) out.push(...check(v, field, `${path}.${name}`));
  }
  return out;
}
