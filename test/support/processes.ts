// Commands and long-running processes for the packaging tests: run to completion with a deadline,
// or start, wait for an HTTP answer, and stop with a signal, keeping what they printed.
import { spawn, type ChildProcess } from 'node:child_process';

export interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface RunOptions {
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  timeoutMs?: number;
}

/** Runs a command to its end (killed at the deadline), without blocking the test's event loop. */
export function run(command: string, args: string[], options: RunOptions = {}): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: options.cwd, env: options.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 120_000);
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** Fails with the command's output when it did not exit 0. */
export function succeeded(result: RunResult, what: string): RunResult {
  if (result.code !== 0) throw new Error(`${what} exited ${result.code}\n--- stdout\n${result.stdout.slice(-4000)}\n--- stderr\n${result.stderr.slice(-4000)}`);
  return result;
}

export class Service {
  output = '';
  readonly exited: Promise<number | null>;
  private exitCode: number | null | undefined;

  constructor(readonly child: ChildProcess) {
    child.stdout?.on('data', (c: Buffer) => (this.output += c.toString()));
    child.stderr?.on('data', (c: Buffer) => (this.output += c.toString()));
    this.exited = new Promise((resolve) => child.once('exit', (code) => resolve((this.exitCode = code))));
  }

  get running(): boolean {
    return this.exitCode === undefined;
  }

  /** Sends the signal and waits for the process to end; its exit code. */
  async stop(signal: NodeJS.Signals = 'SIGTERM'): Promise<number | null> {
    if (this.running) this.child.kill(signal);
    return this.exited;
  }
}

export function startService(command: string, args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv } = {}): Service {
  return new Service(spawn(command, args, { cwd: options.cwd, env: options.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] }));
}

/** Polls `url` until it answers 200; the milliseconds that took. Fails when the service ends first or at the deadline. */
export async function untilAnswers(url: string, service: Service, deadlineMs = 120_000): Promise<number> {
  const started = performance.now();
  for (;;) {
    if (!service.running) throw new Error(`the process ended (${await service.exited}) before ${url} answered:\n${service.output.slice(-4000)}`);
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(2000) });
      await res.arrayBuffer();
      if (res.status === 200) return performance.now() - started;
    } catch {
      // not listening yet
    }
    if (performance.now() - started > deadlineMs) throw new Error(`${url} did not answer within ${deadlineMs} ms:\n${service.output.slice(-4000)}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Whether a process of this id exists (signal 0 checks without sending anything). */
export function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
