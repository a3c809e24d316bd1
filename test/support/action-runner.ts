// Runs a composite GitHub Action's steps as the runner does: each `run:` step with
// `bash --noprofile --norc -eo pipefail`, its `env:` and `${{ }}` expressions filled from the
// inputs (defaults applied) and earlier steps' outputs, GITHUB_ENV / GITHUB_PATH / GITHUB_OUTPUT
// as files read back after each step, RUNNER_TEMP and GITHUB_ACTION_PATH set. `uses:` steps are
// handed to `onUses`, which stands in for them on this machine.
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { run, type RunResult } from './processes.js';

interface ActionStep {
  id?: string;
  name?: string;
  uses?: string;
  with?: Record<string, string>;
  run?: string;
  shell?: string;
  env?: Record<string, string>;
}

interface Action {
  inputs: Record<string, { default?: string; required?: boolean }>;
  outputs: Record<string, { value: string }>;
  runs: { using: string; steps: ActionStep[] };
}

export interface ActionRun {
  /** The job's environment after the action: the runner's, plus what GITHUB_ENV and GITHUB_PATH added. */
  env: Record<string, string>;
  outputs: Record<string, string>;
  /** The steps that ran, with their results; the last one failed when `failed` is set. */
  steps: { name: string; result: RunResult }[];
  failed?: string;
}

/** Reads a GITHUB_ENV / GITHUB_OUTPUT file: NAME=value lines and NAME<<DELIMITER blocks. */
export function readCommandFile(file: string): Record<string, string> {
  const out: Record<string, string> = {};
  const lines = readFileSync(file, 'utf8').split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const heredoc = /^([^=<]+)<<(.+)$/.exec(line);
    if (heredoc) {
      const body: string[] = [];
      while (++i < lines.length && lines[i] !== heredoc[2]) body.push(lines[i]);
      out[heredoc[1]] = body.join('\n');
    } else if (line.includes('=')) {
      out[line.slice(0, line.indexOf('='))] = line.slice(line.indexOf('=') + 1);
    }
  }
  return out;
}

export async function runAction(options: {
  actionPath: string;
  inputs: Record<string, string>;
  env: Record<string, string>;
  onUses: (step: ActionStep) => void;
  timeoutMs?: number;
}): Promise<ActionRun> {
  const action = parse(readFileSync(join(options.actionPath, 'action.yml'), 'utf8')) as Action;
  if (action.runs.using !== 'composite') throw new Error(`not a composite action: ${action.runs.using}`);
  const unknown = Object.keys(options.inputs).filter((k) => !(k in action.inputs));
  if (unknown.length) throw new Error(`the action has no input(s) ${unknown.join(', ')}`);
  const inputs: Record<string, string> = {};
  for (const [name, spec] of Object.entries(action.inputs)) inputs[name] = options.inputs[name] ?? spec.default ?? '';
  const files = mkdtempSync(join(options.env.RUNNER_TEMP ?? '/tmp', 'runner-files-'));
  const env: Record<string, string> = { ...options.env, GITHUB_ACTION_PATH: options.actionPath };
  const stepOutputs: Record<string, Record<string, string>> = {};
  const expression = (text: string) =>
    text.replace(/\$\{\{\s*([^}]+?)\s*\}\}/g, (_, expr: string) => {
      const input = /^inputs\.([\w-]+)$/.exec(expr);
      if (input) return inputs[input[1]] ?? '';
      const output = /^steps\.([\w-]+)\.outputs\.([\w-]+)$/.exec(expr);
      if (output) return stepOutputs[output[1]]?.[output[2]] ?? '';
      if (expr === 'github.action_path') return options.actionPath;
      throw new Error(`the test runner does not evaluate \${{ ${expr} }}`);
    });
  const steps: ActionRun['steps'] = [];
  for (const [index, step] of action.runs.steps.entries()) {
    const name = step.name ?? step.uses ?? `step ${index + 1}`;
    if (step.uses) {
      options.onUses(step);
      continue;
    }
    if (step.shell !== 'bash') throw new Error(`step '${name}': a composite step needs shell: bash here, got ${step.shell}`);
    const stepFiles = { GITHUB_ENV: join(files, `env-${index}`), GITHUB_PATH: join(files, `path-${index}`), GITHUB_OUTPUT: join(files, `output-${index}`) };
    for (const file of Object.values(stepFiles)) writeFileSync(file, '');
    const script = join(files, `step-${index}.sh`);
    writeFileSync(script, expression(step.run ?? ''));
    const stepEnv: Record<string, string> = { ...env, ...stepFiles };
    for (const [key, value] of Object.entries(step.env ?? {})) stepEnv[key] = expression(String(value));
    for (const [key, value] of Object.entries(inputs)) stepEnv[`INPUT_${key.toUpperCase()}`] = value;
    const result = await run('bash', ['--noprofile', '--norc', '-eo', 'pipefail', script], { env: stepEnv, cwd: env.GITHUB_WORKSPACE, timeoutMs: options.timeoutMs ?? 900_000 });
    steps.push({ name, result });
    if (result.code !== 0) return { env, outputs: {}, steps, failed: name };
    Object.assign(env, readCommandFile(stepFiles.GITHUB_ENV));
    const added = readFileSync(stepFiles.GITHUB_PATH, 'utf8').split('\n').filter(Boolean);
    if (added.length) env.PATH = [...added.reverse(), env.PATH].join(':');
    if (step.id) stepOutputs[step.id] = readCommandFile(stepFiles.GITHUB_OUTPUT);
  }
  const outputs: Record<string, string> = {};
  for (const [name, spec] of Object.entries(action.outputs ?? {})) outputs[name] = expression(spec.value);
  return { env, outputs, steps };
}
