// The host tools the runc runtime drives (runc, umoci, ip), their arguments passed as they are (a
// shell only sets the umask, never parses them).
import { spawn } from 'node:child_process';

export class CommandError extends Error {
  constructor(
    message: string,
    readonly code: number | null,
    readonly stderr: string,
  ) {
    super(message);
  }
}

const MAX_OUTPUT = 16 * 1024 * 1024;

/**
 * Runs `tool args…`; resolves with its stdout, rejects with its stderr in the message. Each runs in
 * a process group of its own: a stop signal sent to Keel's group (by `timeout`, a cancelled CI job,
 * a terminal) must not cut short the commands Keel's own shutdown is running.
 */
export function command(tool: string, args: string[], options: { timeoutMs?: number; input?: string } = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(...underUsualUmask(tool, args), { detached: true, stdio: [options.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let failure: string | undefined;
    const fail = (why: string) => {
      failure ??= why;
      child.kill('SIGTERM');
    };
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      stdout += chunk;
      if (stdout.length > MAX_OUTPUT) fail('stdout maxBuffer length exceeded');
    });
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
      stderr += chunk;
      if (stderr.length > MAX_OUTPUT) fail('stderr maxBuffer length exceeded');
    });
    const timer = setTimeout(() => fail(`timed out after ${options.timeoutMs ?? 60_000} ms`), options.timeoutMs ?? 60_000);
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(new CommandError(`${tool} ${args.join(' ')}: ${err.message}`, null, stderr));
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      if (code === 0 && !failure) return resolve(stdout);
      const why = stderr.trim() || failure || (signal ? `killed by ${signal}` : `exit code ${code}`);
      reject(new CommandError(`${tool} ${args.join(' ')}: ${why}`, code, stderr));
    });
    if (options.input !== undefined) child.stdin!.end(options.input);
  });
}

/** Runs it and ignores a failure (cleaning up what may already be gone). */
export async function quietly(tool: string, args: string[]): Promise<void> {
  await command(tool, args).catch(() => undefined);
}

/**
 * The tool under umask 022, as the runtime's tools always ran: Keel itself runs under 077 (see
 * data-dir.ts), but what they create (an unpacked image's directories, the mount points runc makes
 * inside a root filesystem) must stay readable by a container's non-root users.
 */
export function underUsualUmask(tool: string, args: string[]): [string, string[]] {
  return ['/bin/sh', ['-c', 'umask 022 && exec "$0" "$@"', tool, ...args]];
}
