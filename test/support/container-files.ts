// Reading the Dockerfile and compose.yaml the way Docker and Compose read them, for the tests that
// run what they describe on a machine without a container engine.
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';

export interface Stage {
  from: string;
  name?: string;
  /** Instructions after FROM, continuation lines joined: [instruction, arguments]. */
  steps: [string, string][];
}

export function parseDockerfile(file: string): Stage[] {
  const lines = readFileSync(file, 'utf8')
    .replace(/\\\r?\n/g, ' ')
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'));
  const stages: Stage[] = [];
  for (const line of lines) {
    const [, instruction, args] = /^(\S+)\s+(.*)$/.exec(line) ?? [];
    if (!instruction) throw new Error(`cannot read Dockerfile line: ${line}`);
    if (instruction.toUpperCase() === 'FROM') {
      const [from, as, name] = args.split(/\s+/);
      stages.push({ from, name: as?.toUpperCase() === 'AS' ? name : undefined, steps: [] });
    } else {
      stages.at(-1)!.steps.push([instruction.toUpperCase(), args]);
    }
  }
  return stages;
}

/** ENV of a stage: both `ENV A=1 B=2` and `ENV A 1`. */
export function stageEnv(stage: Stage): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [instruction, args] of stage.steps) {
    if (instruction !== 'ENV') continue;
    if (!args.includes('=')) {
      const [key, ...value] = args.split(/\s+/);
      env[key] = value.join(' ');
      continue;
    }
    for (const m of args.matchAll(/([A-Za-z_][A-Za-z0-9_]*)=("([^"]*)"|\S*)/g)) env[m[1]] = m[3] ?? m[2];
  }
  return env;
}

/** The exec-form arguments of an instruction such as ENTRYPOINT ["a", "b"] or HEALTHCHECK ... CMD ["a"]. */
export function execForm(args: string): string[] {
  const json = /\[.*\]/.exec(args);
  if (!json) throw new Error(`not in exec form: ${args}`);
  return JSON.parse(json[0]) as string[];
}

export interface ComposeService {
  image?: string;
  build?: string;
  profiles?: string[];
  environment?: Record<string, string>;
  ports?: string[];
  volumes?: string[];
  depends_on?: unknown;
  init?: boolean;
}

export function readCompose(file: string): { services: Record<string, ComposeService> } {
  return parse(readFileSync(file, 'utf8'), { merge: true }) as { services: Record<string, ComposeService> };
}

/** Compose's variable interpolation: $VAR, ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}, $$. */
export function interpolate(value: string, vars: Record<string, string | undefined>): string {
  return value.replace(/\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?)([-?])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)/g, (match, name, colon, op, arg, bare) => {
    if (match === '$$') return '$';
    if (bare) return vars[bare] ?? '';
    const value = vars[name];
    const missing = colon ? !value : value === undefined;
    if (op === '-' && missing) return arg;
    if (op === '?' && missing) throw new Error(`required variable ${name} is missing a value: ${arg}`);
    return value ?? '';
  });
}

/** The services a profile starts: those of that profile and those without any profile. */
export function servicesOf(compose: { services: Record<string, ComposeService> }, profile: string): string[] {
  return Object.entries(compose.services)
    .filter(([, s]) => !s.profiles || s.profiles.includes(profile))
    .map(([name]) => name);
}

/** "HOST:CONTAINER" port mappings as [host, container]. */
export function portMappings(service: ComposeService): [number, number][] {
  return (service.ports ?? []).map((p) => {
    const [host, container] = p.split(':').slice(-2).map(Number);
    return [host, container];
  });
}
