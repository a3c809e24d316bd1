// `keel serve` as a pipeline runs it: a real process on a free port, found from its log line.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';

export const CLI = join(import.meta.dirname, '..', '..', 'src', 'cli.ts');
const START_DEADLINE_MS = 60_000;

export function keel(env: Record<string, string>, ...args: string[]) {
  const result = spawnSync(process.execPath, ['--import', 'tsx', CLI, ...args], { env: { ...process.env, ...env }, encoding: 'utf8', timeout: 120_000 });
  return { code: result.status, stdout: result.stdout.trim(), stderr: result.stderr.trim() };
}

export interface Served {
  endpoint: string;
  process: ChildProcess;
  /** Every stdout line so far (JSON log lines and the banner). */
  lines: string[];
  stop(): Promise<void>;
}

/** Starts `keel serve` and resolves once it serves; rejects with its output when it exits first. */
export function serveKeel(env: Record<string, string>): Promise<Served> {
  const child = spawn(process.execPath, ['--import', 'tsx', CLI, 'serve'], {
    env: { ...process.env, KEEL_HOST: '127.0.0.1', KEEL_PORT: '0', KEEL_AUDIT_PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  let stderr = '';
  child.stderr!.on('data', (d) => (stderr += String(d)));
  const stop = () =>
    new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve();
      child.once('exit', () => resolve());
      child.kill('SIGTERM');
    });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      void stop();
      reject(new Error(`keel serve did not start within ${START_DEADLINE_MS} ms: ${stderr}`));
    }, START_DEADLINE_MS);
    let buffered = '';
    child.stdout!.on('data', (d) => {
      buffered += String(d);
      const parts = buffered.split('\n');
      buffered = parts.pop()!;
      for (const line of parts) {
        lines.push(line);
        if (line.includes('"keel is serving"')) {
          clearTimeout(timer);
          resolve({ endpoint: JSON.parse(line).endpoint, process: child, lines, stop });
        }
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(Object.assign(new Error(`keel serve exited with ${code}: ${stderr}`), { code, stderr }));
    });
  });
}
