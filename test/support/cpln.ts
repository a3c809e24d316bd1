// The official cpln CLI (node_modules/.bin/cpln, pinned in package.json) run as a user runs it,
// against a Keel listening on a real socket: its own CPLN_HOME and HOME, no update check, no
// stray CPLN_* settings, every call under a timeout, and a guard (test/cli/guard.cjs) that
// records and refuses any connection to a host other than Keel.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const CPLN_BIN = join(import.meta.dirname, '..', '..', 'node_modules', '.bin', 'cpln');
const GUARD = join(import.meta.dirname, '..', 'cli', 'guard.cjs');

export interface CplnResult {
  code: number | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  ms: number;
  /** Connections the guard refused (to anything but Keel), and names it saw looked up. */
  foreign: string[];
}

export interface CplnOptions {
  input?: string;
  timeoutMs?: number;
  env?: Record<string, string>;
  /** Called with the output so far whenever the process writes to stdout (to act on what it serves, e.g. a port-forward). */
  onStdout?: (stdout: string) => void;
  /** Ends the process (SIGTERM) when aborted: for a command that runs until stopped, such as port-forward. */
  signal?: AbortSignal;
}

export class Cpln {
  readonly home = mkdtempSync(join(tmpdir(), 'keel-cpln-'));
  private runs = 0;

  constructor(private readonly allow: string[]) {}

  run(args: string[], options: CplnOptions = {}): Promise<CplnResult> {
    const guardLog = join(this.home, `guard-${++this.runs}.log`);
    const env: Record<string, string> = {};
    for (const [key, value] of Object.entries(process.env)) {
      if (value === undefined || key.startsWith('CPLN_') || ['TERMINAL_SERVER_URL', 'EDITOR', 'VISUAL', 'KUBECONFIG', 'NODE_OPTIONS', 'HTTP_PROXY', 'HTTPS_PROXY', 'http_proxy', 'https_proxy'].includes(key)) continue;
      env[key] = value;
    }
    Object.assign(env, {
      HOME: this.home,
      CPLN_HOME: join(this.home, 'cpln'),
      CPLN_SKIP_UPDATE_CHECK: '1',
      KUBECONFIG: join(this.home, 'kubeconfig'),
      NO_COLOR: '1',
      NODE_OPTIONS: `--require ${GUARD}`,
      KEEL_GUARD_LOG: guardLog,
      KEEL_GUARD_ALLOW: this.allow.join(','),
      ...options.env,
    });
    const timeoutMs = options.timeoutMs ?? 60_000;
    const begun = Date.now();
    return new Promise((resolve, reject) => {
      const child = spawn(CPLN_BIN, args, { env, cwd: this.home, stdio: ['pipe', 'pipe', 'pipe'], detached: true });
      let stdout = '';
      let stderr = '';
      let timedOut = false;
      const stop = () => {
        try {
          process.kill(-child.pid!, 'SIGKILL');
        } catch {
          // already gone
        }
      };
      const timer = setTimeout(() => {
        timedOut = true;
        stop();
      }, timeoutMs);
      const end = () => {
        try {
          process.kill(-child.pid!, 'SIGTERM');
        } catch {
          // already gone
        }
      };
      if (options.signal?.aborted) end();
      options.signal?.addEventListener('abort', end, { once: true });
      child.stdout.on('data', (chunk) => {
        stdout += chunk;
        options.onStdout?.(stdout);
      });
      child.stderr.on('data', (chunk) => (stderr += chunk));
      child.on('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
      child.on('close', (code) => {
        clearTimeout(timer);
        options.signal?.removeEventListener('abort', end);
        const seen = existsSync(guardLog) ? readFileSync(guardLog, 'utf8').split('\n').filter(Boolean) : [];
        rmSync(guardLog, { force: true });
        resolve({ code, stdout: stdout.trim(), stderr: stderr.trim(), timedOut, ms: Date.now() - begun, foreign: seen.filter((l) => !l.startsWith('CONNECT ')) });
      });
      child.stdin.end(options.input ?? '');
    });
  }

  cleanup(): void {
    rmSync(this.home, { recursive: true, force: true });
  }
}
