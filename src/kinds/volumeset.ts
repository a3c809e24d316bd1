import { defineKind, standardPermissions } from './define.js';
import { anyObject, arr, bool, cpu, cronSchedule, immutable, keyed, map, memory, num, obj, oneOf, readOnly, str } from './schema.js';


const volume = obj({
  lifecycle: str(),
  storageDeviceId: str(),
  oldStorageDeviceIds: arr(str()),
  resourceName: str(),
  index: num(),
  currentSize: num(),
  currentBytesUsed: num(),
  currentBytesFree: num(),
  iops: num(),
  throughput: num(),
  driver: str(),
  volumeSnapshots: arr(
    obj({ name: str(), id: str(), created: str(), expires: str(), size: num(), tags: arr(anyObject()) }),
  ),
  attributes: anyObject(),
  zone: str(),
});

// `shared`: a file system that several replicas mount at once (performance class and type together).
export const PERFORMANCE_CLASSES = ['general-purpose-ssd', 'high-throughput-ssd', 'shared'] as const;
export const FILE_SYSTEM_TYPES = ['ext4', 'xfs', 'shared'] as const;

// Seed 2.5 and 4.2.
export default defineKind({
  kind: 'volumeset',
  scope: 'gvc',
  summary: 'A set of persistent volumes, one or more per location, that workloads mount.',
  fields: {
    spec: obj({
      initialCapacity: num({ minimum: 10, maximum: 65536 }),
      performanceClass: immutable(oneOf(PERFORMANCE_CLASSES)),
      storageClassSuffix: str({ maxLength: 64 }),
      fileSystemType: immutable(oneOf(FILE_SYSTEM_TYPES)),
      customEncryption: obj({ regions: map(obj({ keyId: str({ maxLength: 2048 }) })) }),
      snapshots: obj({
        createFinalSnapshot: bool(),
        retentionDuration: str({ maxLength: 32, pattern: '^[0-9]+(\\.[0-9]+)?[dhm]$' }),
        schedule: cronSchedule(),
      }),
      autoscaling: obj({
        maxCapacity: num({ minimum: 10, maximum: 65536 }),
        minFreePercentage: num({ minimum: 1, maximum: 100 }),
        scalingFactor: num({ minimum: 1.1 }),
        predictive: obj({
          enabled: bool(),
          lookbackHours: num({ minimum: 1, maximum: 720 }),
          projectionHours: num({ minimum: 1, maximum: 720 }),
          minDataPoints: num({ minimum: 1 }),
          minGrowthRateGBPerHour: num({ minimum: 0 }),
          scalingFactor: num({ minimum: 1 }),
        }),
      }),
      mountOptions: obj({
        resources: obj({ maxCpu: cpu(), minCpu: cpu(), minMemory: memory(), maxMemory: memory() }),
      }),
    }),
    status: readOnly(
      obj({
        parentId: str(),
        usedByWorkload: str(),
        workloadLinks: arr(str()),
        bindingId: str(),
        locations: keyed(obj({ name: str(), desiredVolumeCount: num(), clusterId: str(), volumes: arr(volume) })),
      }),
    ),
  },
  permissions: standardPermissions('volume sets', [
    { name: 'exec', description: 'Run commands (expand, shrink, snapshot, restore) on volume sets' },
  ]),
  defaults(item) {
    const spec = (item.spec ??= {}) as Record<string, unknown>;
    spec.initialCapacity ??= 10;
    spec.performanceClass ??= 'general-purpose-ssd';
    spec.fileSystemType ??= 'ext4';
    item.status ??= {};
  },
});
