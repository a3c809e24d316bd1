// The host tools the runc runtime drives (runc, umoci, ip), their arguments passed as they are (a
// shell only sets the umask, never parses them).
import { execFile } from 'node:child_process';

export class CommandError extends Error {
  constructor(
    message: string,
    readonly code: number | null,
    readonly stderr: string,
  ) {
    super(message);
  }
}

/** Runs `tool args…`; resolves with its stdout, rejects with its stderr in the message. */
export function command(tool: string, args: string[], options: { timeoutMs?: number; input?: string } = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile(...underUsualUmask(tool, args), { timeout: options.timeoutMs ?? 60_000, maxBuffer: 16 * 1024 * 1024, encoding: 'utf8' }, (err, stdout, stderr) => {
      if (!err) return resolve(stdout);
      const code = typeof (err as { code?: unknown }).code === 'number' ? ((err as { code: number }).code) : null;
      reject(new CommandError(`${tool} ${args.join(' ')}: ${(stderr || err.message).trim()}`, code, stderr));
    });
    if (options.input !== undefined) child.stdin?.end(options.input);
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
