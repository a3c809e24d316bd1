// A second Keel as a real process on the same PostgreSQL database: its caches, feeds and event
// emitters are its own, so what it sees of the first process's writes comes through the database.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const CLI = join(import.meta.dirname, '..', '..', 'src', 'cli.ts');

export interface KeelProcess {
  base: string;
  dataDir: string;
  pid: number;
  stop(): Promise<void>;
}

/** `dataDir`: a data directory of the caller's, kept after stop (one of its own is made and removed otherwise). */
export async function spawnKeel(databaseUrl: string, env: Record<string, string> = {}, options: { dataDir?: string } = {}): Promise<KeelProcess> {
  const dataDir = options.dataDir ?? mkdtempSync(join(tmpdir(), 'keel-second-'));
  const child = spawn(process.execPath, ['--import', 'tsx', CLI, 'serve'], {
    env: { ...process.env, KEEL_DATA_DIR: dataDir, KEEL_PORT: '0', KEEL_AUDIT_PORT: '0', KEEL_HOST: '127.0.0.1', KEEL_LOG_LEVEL: 'info', KEEL_DATABASE_URL: databaseUrl, KEEL_RECONCILE: 'off', ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const base = await new Promise<string>((resolve, reject) => {
    let out = '';
    const onData = (chunk: Buffer) => {
      out += chunk.toString();
      const m = /"endpoint":"(http:\/\/[^"]+)".*"msg":"keel is serving"/.exec(out);
      if (m) {
        child.stdout!.off('data', onData);
        child.stdout!.resume();
        resolve(m[1]);
      }
    };
    child.stdout!.on('data', onData);
    void exited.then(() => reject(new Error(`keel exited before serving: ${out}`)));
  });
  return {
    base,
    dataDir,
    pid: child.pid!,
    async stop() {
      child.kill('SIGTERM');
      await exited;
      if (!options.dataDir) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
