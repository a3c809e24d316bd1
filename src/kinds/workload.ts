import { ApiError, type FieldError } from '../errors.js';
import { parseQuantity } from './formats.js';
import { CLOUD_SCHEMES, parseVolumeUri, volumePathProblem } from './volumeuri.js';
import { defineKind, standardPermissions } from './define.js';
import { wholeValueMatch } from '../linear-regexp.js';
import { registryImage } from './registryimage.js';
import { linksAt } from './references.js';
import type { Reference, ReferenceContext } from './types.js';
import {
  anyObject, arr, bool, cpu, cronSchedule, hostPattern, image, immutable, int, keyed, link, memory, num, obj, oneOf, readOnly, str, type JsonSchema,
} from './schema.js';

/** The hosted bounds of rolloutOptions.terminationGracePeriodSeconds: 900 s, or 3600 s with the tag. */
const GRACE_MAX = 900;
const GRACE_RELAXED_MAX = 3600;
const RELAX_GRACE_TAG = 'cpln/relaxGracePeriodMax';

// Workload spec from the public types (types-ts workload.ts, workloadOptions.ts) and the
// Terraform provider's documented defaults. Closed everywhere except envoy/keda/extras blocks.

export const WORKLOAD_TYPES = ['standard', 'serverless', 'cron', 'stateful', 'vm'] as const;

const DISK_BUSES = ['virtio', 'sata', 'scsi'] as const;
const bootOrder = () => int({ minimum: 1, maximum: 16 });

const port = () => int({ minimum: 1, maximum: 65535 });
/** Ports the service's own sidecars and agents listen on inside every replica. */
export const RESERVED_PORTS = [8012, 8022, 9090, 9091, 15000, 15001, 15006, 15020, 15021, 15090, 41000];
/** A port a container listens on or is reached at: 80 and up, none of the reserved ones. */
const containerPort = (maximum = 65535) => int({ minimum: 80, maximum, not: { enum: RESERVED_PORTS } });
const strings = (max = 100, len = 1024) => arr(str({ maxLength: len }), { maxItems: max });
const execAction = () => obj({ command: strings() });

const probe = (): JsonSchema =>
  obj({
    exec: execAction(),
    grpc: obj({ port: containerPort() }),
    tcpSocket: obj({ port: containerPort() }),
    httpGet: obj({
      path: str({ maxLength: 1024 }),
      port: containerPort(),
      httpHeaders: arr(obj({ name: str({ maxLength: 256 }), value: str({ maxLength: 4096 }) }, { required: ['name', 'value'] }), {
        maxItems: 50,
      }),
      scheme: oneOf(['HTTP', 'HTTPS']),
    }),
    initialDelaySeconds: int({ minimum: 0 }),
    periodSeconds: int({ minimum: 1 }),
    timeoutSeconds: int({ minimum: 1 }),
    successThreshold: int({ minimum: 1 }),
    failureThreshold: int({ minimum: 1 }),
  });

const container = obj(
  {
    name: str({ minLength: 1, maxLength: 64 }),
    image: image(),
    workingDir: str({ maxLength: 1024 }),
    metrics: obj(
      { port: containerPort(), path: str({ maxLength: 1024 }), dropMetrics: strings() },
      { required: ['port', 'path'] },
    ),
    port: containerPort(),
    ports: arr(obj({ protocol: oneOf(['http', 'http2', 'grpc', 'tcp']), number: containerPort() }, { required: ['number'] }), { maxItems: 20 }),
    cpu: cpu(),
    memory: memory(),
    minCpu: cpu(),
    minMemory: memory(),
    readinessProbe: probe(),
    livenessProbe: probe(),
    env: keyed(obj({ name: str({ minLength: 1, maxLength: 256 }), value: str({ maxLength: 65536 }) }, { required: ['name'] }), 'name', {
      maxItems: 500,
    }),
    gpu: obj({
      nvidia: obj({ model: {}, quantity: int({ minimum: 0 }) }),
      custom: obj({ resource: str({ maxLength: 256 }), runtimeClass: str({ maxLength: 256 }), quantity: int({ minimum: 0 }) }, { required: ['resource'] }),
    }),
    inheritEnv: bool(),
    command: str({ maxLength: 4096 }),
    args: strings(200, 4096),
    lifecycle: obj({ postStart: obj({ exec: execAction() }), preStop: obj({ exec: execAction() }) }),
    volumes: arr(
      obj(
        {
          uri: str({ minLength: 1, maxLength: 1024 }),
          recoveryPolicy: oneOf(['retain', 'recycle']),
          path: str({ maxLength: 1024 }),
          // A VM's disks: attached as block devices, named, on a bus, in a boot order.
          name: str({ maxLength: 64 }),
          bus: oneOf(DISK_BUSES),
          bootOrder: bootOrder(),
        },
        { required: ['uri'] },
      ),
      { maxItems: 20 },
    ),
  },
  // A VM's container may leave out its image (the VM boots from spec.vm.bootDisk); check() requires it elsewhere.
  { required: ['name'] },
);

const secretLinks = (max: number) => arr(link(), { maxItems: max });

/** A virtual machine (type vm, run by KubeVirt on the hosted service): its disk, firmware and guest. */
const vm = obj({
  bootDisk: obj({
    source: obj(
      {
        oci: obj({ image: image() }, { required: ['image'] }),
        http: obj(
          { url: str({ minLength: 1, maxLength: 2048, pattern: '^https?://' }), checksum: str({ maxLength: 160, pattern: '^sha(256|512):[0-9a-fA-F]+$' }) },
          { required: ['url'] },
        ),
      },
      { maxProperties: 1 },
    ),
    persist: obj({ volumeSet: str({ maxLength: 512, pattern: '^cpln://volumeset/[a-z][-a-z0-9]*$' }) }, { required: ['volumeSet'] }),
    bus: oneOf(DISK_BUSES),
    bootOrder: bootOrder(),
  }),
  cpu: obj({ sockets: int({ minimum: 1, maximum: 32 }), threads: int({ minimum: 1, maximum: 8 }) }),
  firmware: obj({
    bootloader: oneOf(['bios', 'efi']),
    secureBoot: bool(),
    uuid: str({ maxLength: 64 }),
    serial: str({ maxLength: 256 }),
    smbios: obj(Object.fromEntries(['manufacturer', 'product', 'version', 'sku', 'family'].map((f) => [f, str({ maxLength: 256 })]))),
  }),
  guestOS: oneOf(['linux', 'windows']),
  networks: arr(obj({ name: str({ minLength: 1, maxLength: 63 }) }), { maxItems: 1 }),
  cloudInit: obj(
    {
      userData: str({ maxLength: 65536 }),
      userDataBase64: str({ maxLength: 87384, pattern: '^[A-Za-z0-9+/]*={0,2}$' }),
      userDataSecret: link(),
      sshPublicKeySecrets: secretLinks(8),
    },
  ),
  accessCredentials: arr(
    obj(
      {
        sshPublicKeySecret: link(),
        users: arr(str({ minLength: 1, maxLength: 32, pattern: '^[a-z_][a-z0-9_-]*$' }), { minItems: 1, maxItems: 16 }),
        deliveryMethod: oneOf(['qemuGuestAgent', 'configDrive']),
      },
      { required: ['sshPublicKeySecret', 'users'] },
    ),
    { maxItems: 8 },
  ),
  runStrategy: oneOf(['Always', 'RerunOnFailure', 'Manual', 'Halted']),
  clock: obj({ timezone: str({ minLength: 1, maxLength: 64 }) }),
  hostname: str({ maxLength: 63, pattern: '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$' }),
  subdomain: str({ maxLength: 63, pattern: '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$' }),
});

const autoscaling = obj({
  metric: oneOf(['concurrency', 'cpu', 'memory', 'rps', 'latency', 'keda', 'disabled']),
  multi: arr(obj({ metric: str({ maxLength: 32 }), target: num({ minimum: 0 }) }), { maxItems: 10 }),
  metricPercentile: oneOf(['p50', 'p75', 'p99']),
  target: num({ minimum: 0, maximum: 20000 }),
  maxScale: int({ minimum: 0 }),
  minScale: int({ minimum: 0 }),
  scaleToZeroDelay: int({ minimum: 30, maximum: 3600 }),
  maxConcurrency: int({ minimum: 0, maximum: 1000 }),
  keda: anyObject(),
});

const optionFields = {
  autoscaling,
  timeoutSeconds: int({ minimum: 1, maximum: 3600 }),
  capacityAI: bool(),
  capacityAIUpdateMinutes: int({ minimum: 0 }),
  spot: bool(),
  debug: bool(),
  suspend: bool(),
  multiZone: obj({ enabled: bool() }),
};

const protocolPort = (protocols: readonly string[]) =>
  obj({ protocol: oneOf(protocols), number: containerPort(65000) }, { required: ['protocol', 'number'] });

export default defineKind({
  kind: 'workload',
  scope: 'gvc',
  summary: 'A set of containers that runs in every location of its GVC: a standard or serverless service, a cron job, or a stateful set.',
  fields: {
    spec: obj(
      {
        type: immutable(oneOf(WORKLOAD_TYPES)),
        identityLink: link(),
        containers: keyed(container, 'name', { minItems: 1, maxItems: 20 }),
        firewallConfig: obj({
          external: obj({
            inboundAllowCIDR: strings(500, 64),
            inboundBlockedCIDR: strings(500, 64),
            outboundAllowHostname: arr(hostPattern(), { maxItems: 500 }),
            outboundAllowPort: arr(protocolPort(['http', 'https', 'tcp']), { maxItems: 100 }),
            outboundAllowCIDR: strings(500, 64),
            outboundBlockedCIDR: strings(500, 64),
            http: obj({
              inboundHeaderFilter: arr(
                obj({ key: str({ maxLength: 256 }), allowedValues: strings(), blockedValues: strings() }, { required: ['key'] }),
                { maxItems: 50 },
              ),
            }),
          }),
          internal: obj({
            inboundAllowType: oneOf(['none', 'same-gvc', 'same-org', 'workload-list']),
            inboundAllowWorkload: arr(link(), { maxItems: 500 }),
          }),
        }),
        defaultOptions: obj(optionFields),
        localOptions: keyed(obj({ ...optionFields, location: str({ maxLength: 512 }) }, { required: ['location'] }), 'location', {
          maxItems: 100,
        }),
        job: obj(
          {
            schedule: cronSchedule(),
            concurrencyPolicy: oneOf(['Forbid', 'Replace', 'Allow']),
            historyLimit: int({ minimum: 1, maximum: 10 }),
            restartPolicy: oneOf(['OnFailure', 'Never']),
            activeDeadlineSeconds: int({ minimum: 1 }),
          },
          { required: ['schedule'] },
        ),
        sidecar: obj({ envoy: anyObject() }),
        supportDynamicTags: bool(),
        rolloutOptions: obj({
          minReadySeconds: int({ minimum: 0 }),
          maxUnavailableReplicas: str({ maxLength: 16 }),
          maxSurgeReplicas: str({ maxLength: 16 }),
          scalingPolicy: oneOf(['OrderedReady', 'Parallel']),
          terminationGracePeriodSeconds: int({ minimum: 0, maximum: GRACE_RELAXED_MAX }),
        }),
        securityOptions: obj({ filesystemGroupId: int({ minimum: 0 }), runAsUser: int({ minimum: 0 }) }),
        loadBalancer: obj({
          direct: obj(
            {
              enabled: bool(),
              ports: arr(
                obj(
                  {
                    externalPort: port(),
                    protocol: oneOf(['TCP', 'UDP']),
                    scheme: oneOf(['http', 'tcp', 'https', 'ws', 'wss']),
                    containerPort: containerPort(),
                  },
                  { required: ['externalPort', 'protocol'] },
                ),
                { maxItems: 20 },
              ),
              ipSet: str({ maxLength: 512 }),
            },
            { required: ['enabled'] },
          ),
          geoLocation: obj({
            enabled: bool(),
            headers: obj({
              asn: str({ maxLength: 128 }),
              city: str({ maxLength: 128 }),
              country: str({ maxLength: 128 }),
              region: str({ maxLength: 128 }),
            }),
          }),
          replicaDirect: bool(),
        }),
        extras: anyObject(),
        requestRetryPolicy: obj({ attempts: int({ minimum: 0 }), retryOn: strings(20, 64) }),
        vm,
      },
      { required: ['containers'] },
    ),
    status: readOnly(anyObject()),
  },
  required: ['spec'],
  permissions: standardPermissions('workloads', [
    { name: 'connect', description: 'Open an interactive session to a replica' },
    { name: 'configureLoadBalancer', description: 'Change the load balancer settings of a workload' },
    { name: 'exec', description: 'Run commands against a workload' },
    { name: 'exec.runCronWorkload', description: 'Start a run of a cron workload now' },
    { name: 'exec.stopReplica', description: 'Stop a running replica' },
  ]),
  implied: { exec: ['exec.runCronWorkload', 'exec.stopReplica'] },
  defaults(item) {
    const spec = (item.spec ??= {}) as Record<string, unknown>;
    spec.type ??= 'standard';
    const options = (spec.defaultOptions ??= {}) as Record<string, unknown>;
    if (spec.type === 'cron') {
      // Cron jobs neither autoscale nor right-size; the hosted service shows capacityAI off for them.
      options.capacityAI ??= false;
    } else {
      const scaling = (options.autoscaling ??= {}) as Record<string, unknown>;
      scaling.metric ??= 'concurrency';
      scaling.target ??= 100;
      scaling.minScale ??= 1;
      scaling.maxScale ??= 5;
      scaling.scaleToZeroDelay ??= 300;
      scaling.maxConcurrency ??= 0;
      options.capacityAI ??= true;
    }
    options.timeoutSeconds ??= 5;
    options.debug ??= false;
    options.suspend ??= false;
    item.status ??= {};
  },
  references: workloadReferences,
  check(item, ctx) {
    // Workload names become DNS labels with suffixes: at most 49 characters, never `-headless`.
    const name = String(item.name ?? '');
    if (name.length > 49 || name.endsWith('-headless')) {
      throw ApiError.badRequest(`invalid workload name '${name}': at most 49 characters and must not end in -headless`, [
        { path: 'name', message: 'must be at most 49 characters and not end in -headless' },
      ]);
    }
    const spec = (item.spec ?? {}) as Record<string, unknown>;
    if (spec.type === 'cron' && !spec.job) {
      throw ApiError.badRequest('a cron workload needs spec.job with a schedule', [{ path: 'spec.job', message: 'is required for cron workloads' }]);
    }
    if ((spec.type === 'vm') !== (spec.vm !== undefined)) {
      const message = spec.type === 'vm' ? 'is required for vm workloads' : 'is only allowed for vm workloads';
      throw ApiError.badRequest(`spec.vm ${message}`, [{ path: 'spec.vm', message }]);
    }
    const containers = Array.isArray(spec.containers) ? (spec.containers as Array<Record<string, unknown>>) : [];
    checkContainerShape(containers, spec.type === 'vm');
    checkImagesOwned(spec, ctx.place.org);
    const cloudInit = (spec.vm as { cloudInit?: Record<string, unknown> } | undefined)?.cloudInit;
    const userData = ['userData', 'userDataBase64', 'userDataSecret'].filter((f) => cloudInit?.[f] !== undefined);
    if (userData.length > 1) {
      throw ApiError.badRequest(`spec.vm.cloudInit: set only one of ${userData.join(', ')}`, [
        { path: `spec.vm.cloudInit.${userData[1]}`, message: 'only one of userData, userDataBase64 and userDataSecret may be set' },
      ]);
    }
    checkResources(containers, spec.type, (item.tags ?? {}) as Record<string, unknown>);
    checkHeaderFilters(spec);
    checkGracePeriod(spec, (item.tags ?? {}) as Record<string, unknown>);
    const scaling = ((spec.defaultOptions ?? {}) as Record<string, unknown>).autoscaling as Record<string, unknown> | undefined;
    if (scaling && typeof scaling.minScale === 'number' && typeof scaling.maxScale === 'number' && scaling.minScale > scaling.maxScale) {
      throw ApiError.badRequest('spec.defaultOptions.autoscaling.minScale must not exceed maxScale', [
        { path: 'spec.defaultOptions.autoscaling.minScale', message: 'must not exceed maxScale' },
      ]);
    }
  },
  links(_item, self) {
    return [{ rel: 'deployment', href: `${self}/deployment` }];
  },
});

// The hosted service's floors and ratios for container resources (Control Plane's published
// workload validation rules), with its defaults (50m, 128Mi) where a container leaves them out.
const CPU_FLOOR = 0.025;
const MEMORY_FLOOR_MIB = 32;
const RELAX_RATIO_TAG = 'cpln/relaxMemoryToCpuRatio';
const MiB = 2 ** 20;

const tagged = (tags: Record<string, unknown>, tag: string) => tags[tag] !== undefined && tags[tag] !== null && tags[tag] !== false && tags[tag] !== 'false';

function checkGracePeriod(spec: Record<string, any>, tags: Record<string, unknown>): void {
  const grace = spec.rolloutOptions?.terminationGracePeriodSeconds;
  if (typeof grace !== 'number' || grace <= GRACE_MAX || tagged(tags, RELAX_GRACE_TAG)) return;
  const message = `must be at most ${GRACE_MAX} (the tag ${RELAX_GRACE_TAG} allows up to ${GRACE_RELAXED_MAX})`;
  throw ApiError.badRequest(`invalid workload: spec.rolloutOptions.terminationGracePeriodSeconds ${message}`, [{ path: 'spec.rolloutOptions.terminationGracePeriodSeconds', message }]);
}

function checkResources(containers: Array<Record<string, unknown>>, type: unknown, tags: Record<string, unknown>): void {
  const errors: FieldError[] = [];
  const maxRatio = tagged(tags, RELAX_RATIO_TAG) ? 32 : 8;
  containers.forEach((c, i) => {
    const at = (field: string) => `spec.containers[${i}].${field}`;
    const read = (field: string) => (typeof c[field] === 'string' ? parseQuantity(c[field] as string) : undefined);
    const cores = read('cpu') ?? 0.05;
    const mib = (read('memory') ?? 128 * MiB) / MiB;
    const minCores = read('minCpu');
    const minMib = read('minMemory') === undefined ? undefined : read('minMemory')! / MiB;
    for (const [field, value] of [['cpu', read('cpu')], ['minCpu', minCores]] as const) {
      if (value !== undefined && value < CPU_FLOOR) errors.push({ path: at(field), message: 'must be at least 25m (25 millicores)' });
    }
    for (const [field, value] of [['memory', read('memory')], ['minMemory', read('minMemory')]] as const) {
      if (value !== undefined && value / MiB < MEMORY_FLOOR_MIB) errors.push({ path: at(field), message: 'must be at least 32Mi' });
    }
    if (mib / (cores * 1000) > maxRatio) {
      errors.push({
        path: at('memory'),
        message: `must be at most ${maxRatio}Mi per millicore of cpu: ${Math.round(mib)}Mi needs a cpu of at least ${Math.ceil(mib / maxRatio)}m${maxRatio === 8 ? ` (the tag ${RELAX_RATIO_TAG} allows 32Mi per millicore)` : ''}`,
      });
    }
    if (minCores !== undefined && minCores > cores) errors.push({ path: at('minCpu'), message: 'must not be more than cpu' });
    if (minMib !== undefined && minMib > mib) errors.push({ path: at('minMemory'), message: 'must not be more than memory' });
    if (type === 'stateful') {
      if (minCores !== undefined && (cores / minCores > 4 || cores - minCores > 4)) {
        errors.push({ path: at('minCpu'), message: 'must be at least a quarter of cpu, and at most 4 cores below it, for a stateful workload' });
      }
      if (minMib !== undefined && (mib / minMib > 4 || mib - minMib > 4096)) {
        errors.push({ path: at('minMemory'), message: 'must be at least a quarter of memory, and at most 4Gi below it, for a stateful workload' });
      }
    }
  });
  if (errors.length) throw ApiError.badRequest(`invalid workload: ${errors.map((e) => `${e.path} ${e.message}`).join('; ')}`, errors);
}

/** VM workloads boot a disk and attach volumes as named block devices; other types run an image and mount volumes at paths. */
function checkContainerShape(containers: Array<Record<string, unknown>>, vm: boolean): void {
  const errors: FieldError[] = [];
  containers.forEach((c, i) => {
    if (!vm && c.image === undefined) errors.push({ path: `spec.containers[${i}].image`, message: 'is required (only a vm workload may leave it out)' });
    // The platform sets these itself (CPLN_TOKEN, CPLN_WORKLOAD, …): a workload may not shadow them.
    (Array.isArray(c.env) ? (c.env as Array<Record<string, unknown>>) : []).forEach((e, j) => {
      if (typeof e?.name === 'string' && e.name.toUpperCase().startsWith('CPLN_')) {
        errors.push({ path: `spec.containers[${i}].env[${j}].name`, message: `'${e.name}' is reserved: names beginning with CPLN_ are set by the platform` });
      }
    });
    const volumes = Array.isArray(c.volumes) ? (c.volumes as Array<Record<string, unknown>>) : [];
    const paths = new Set<string>();
    volumes.forEach((v, j) => {
      const at = `spec.containers[${i}].volumes[${j}]`;
      if (typeof v.uri === 'string' && !parseVolumeUri(v.uri)) {
        errors.push({ path: `${at}.uri`, message: `'${v.uri}' is not a volume URI: cpln://volumeset/NAME, cpln://secret/NAME[.KEY], scratch://NAME or ${CLOUD_SCHEMES.map((s) => `${s}://…`).join(', ')}` });
      }
      if (!vm && typeof v.path === 'string') {
        const problem = volumePathProblem(v.path);
        if (problem) errors.push({ path: `${at}.path`, message: problem });
        else if (paths.has(v.path)) errors.push({ path: `${at}.path`, message: `is mounted twice in container ${String(c.name)}` });
        paths.add(v.path);
      }
      if (vm) {
        if (v.name === undefined) errors.push({ path: `${at}.name`, message: 'is required for a vm workload' });
        if (v.path !== undefined) errors.push({ path: `${at}.path`, message: 'is not allowed for a vm workload (its volumes are disks, not mounts)' });
      } else {
        if (v.path === undefined) errors.push({ path: `${at}.path`, message: 'is required' });
        for (const field of ['name', 'bus', 'bootOrder']) {
          if (v[field] !== undefined) errors.push({ path: `${at}.${field}`, message: 'is only allowed for vm workloads' });
        }
      }
    });
  });
  if (errors.length) throw ApiError.badRequest(`invalid workload: ${errors.map((e) => `${e.path} ${e.message}`).join('; ')}`, errors);
}

/** The images a workload runs: its containers' and a VM's boot disk's, with their paths. */
function imagesOf(spec: Record<string, any>): Array<{ image: string; path: string }> {
  const out: Array<{ image: string; path: string }> = [];
  (Array.isArray(spec.containers) ? spec.containers : []).forEach((c: Record<string, unknown>, i: number) => {
    if (typeof c?.image === 'string') out.push({ image: c.image, path: `spec.containers[${i}].image` });
  });
  const boot = spec.vm?.bootDisk?.source?.oci?.image;
  if (typeof boot === 'string') out.push({ image: boot, path: 'spec.vm.bootDisk.source.oci.image' });
  return out;
}

/** Header filters' values are regular expressions Keel runs in linear time (see linear-regexp.ts): one it cannot is refused. */
function checkHeaderFilters(spec: Record<string, any>): void {
  const filters = spec.firewallConfig?.external?.http?.inboundHeaderFilter;
  const errors: FieldError[] = [];
  (Array.isArray(filters) ? filters : []).forEach((f: Record<string, unknown>, i: number) => {
    for (const field of ['allowedValues', 'blockedValues']) {
      const values = f?.[field];
      (Array.isArray(values) ? values : []).forEach((value: unknown, j: number) => {
        if (typeof value !== 'string') return;
        try {
          wholeValueMatch(value);
        } catch (err) {
          errors.push({ path: `spec.firewallConfig.external.http.inboundHeaderFilter[${i}].${field}[${j}]`, message: linearRefusal(value, err as Error) });
        }
      });
    }
  });
  if (errors.length) throw ApiError.badRequest(`invalid workload: ${errors.map((e) => `${e.path} ${e.message}`).join('; ')}`, errors);
}

/** Why a header filter's pattern is refused: not a regular expression at all, or one the linear-time engine cannot run. */
function linearRefusal(pattern: string, err: Error): string {
  try {
    new RegExp(pattern);
  } catch {
    return `is not a valid regular expression (${err.message.replace(/^Invalid regular expression: \/.*\/l: /, '')})`;
  }
  return 'uses a lookaround ((?=…), (?!…), (?<=…), (?<!…)) or a backreference (\\1, \\k<name>), which Keel does not run: header values are matched in linear time, so no pattern can stall the ingress';
}

/** A workload runs only images of its own org's registry: one that names another org's is refused, whether it exists or not. */
function checkImagesOwned(spec: Record<string, unknown>, org: string): void {
  const errors: FieldError[] = imagesOf(spec)
    .filter(({ image }) => {
      const named = registryImage(image, org);
      return named !== undefined && named.org !== org;
    })
    .map(({ path }) => ({ path, message: `names another org's registry; a workload runs only images of its own org (${org})` }));
  if (errors.length) throw ApiError.badRequest(`invalid workload: ${errors.map((e) => `${e.path} ${e.message}`).join('; ')}`, errors);
}

const VM_SECRET_LINKS = [
  { at: 'spec.vm.cloudInit.userDataSecret', kind: 'secret', permission: 'use' },
  { at: 'spec.vm.cloudInit.sshPublicKeySecrets[]', kind: 'secret', permission: 'use' },
  { at: 'spec.vm.accessCredentials[].sshPublicKeySecret', kind: 'secret', permission: 'use' },
] as const;

const ENV_SECRET = 'cpln://secret/';

/**
 * What a workload's spec refers to: its identity (`use`), the secrets its env and volumes read
 * (`use`), the volume sets it mounts (`view`: volume sets have no `use`) and the images of its
 * org's registry it runs (`pull`).
 */
function workloadReferences(item: Record<string, unknown>, ctx: ReferenceContext): Reference[] {
  const spec = (item.spec ?? {}) as Record<string, any>;
  const out: Reference[] = linksAt(item, [{ at: 'spec.identityLink', kind: 'identity', permission: 'use' }, ...VM_SECRET_LINKS]);
  const volume = (uri: unknown, path: string) => {
    const source = typeof uri === 'string' ? parseVolumeUri(uri) : undefined;
    if (source?.kind === 'secret') out.push({ kind: 'secret', name: source.name, permission: 'use', path });
    if (source?.kind === 'volumeset') out.push({ kind: 'volumeset', name: source.name, permission: 'view', path });
  };
  (Array.isArray(spec.containers) ? spec.containers : []).forEach((c: Record<string, any>, i: number) => {
    (Array.isArray(c?.env) ? c.env : []).forEach((e: Record<string, unknown>, j: number) => {
      // NAME or NAME.KEY: the secret is named up to the first dot, however the rest is read.
      if (typeof e?.value === 'string' && e.value.startsWith(ENV_SECRET)) {
        out.push({ kind: 'secret', name: e.value.slice(ENV_SECRET.length).split('.')[0], permission: 'use', path: `spec.containers[${i}].env[${j}].value` });
      }
    });
    (Array.isArray(c?.volumes) ? c.volumes : []).forEach((v: Record<string, unknown>, j: number) => volume(v?.uri, `spec.containers[${i}].volumes[${j}].uri`));
  });
  const persist = spec.vm?.bootDisk?.persist?.volumeSet;
  if (persist !== undefined) volume(persist, 'spec.vm.bootDisk.persist.volumeSet');
  for (const { image, path } of imagesOf(spec)) {
    const named = registryImage(image, ctx.place.org, ctx.registryHosts);
    if (named && named.org === ctx.place.org) out.push({ kind: 'image', name: 'digest' in named ? named.repository : named.name, permission: 'pull', path });
  }
  return out;
}
