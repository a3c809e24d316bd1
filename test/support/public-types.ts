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
