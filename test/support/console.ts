// The console's browser tests need its built files (dist/console); they are built here when missing
// or older than a source file, the way `npm run build` builds them.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { consoleDir } from '../../src/server/console.js';

function newest(dir: string): number {
  let latest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    latest = Math.max(latest, entry.isDirectory() ? newest(path) : statSync(path).mtimeMs);
  }
  return latest;
}

export function ensureConsoleBuilt(): void {
  const index = join(consoleDir(), 'index.html');
  const root = join(consoleDir(), '..', '..');
  const sources = Math.max(newest(join(root, 'console', 'src')), statSync(join(root, 'console', 'index.html')).mtimeMs, statSync(join(root, 'console', 'vite.config.mjs')).mtimeMs);
  if (existsSync(index) && statSync(index).mtimeMs >= sources) return;
  const run = spawnSync('npm', ['run', 'build:console'], { cwd: root, stdio: 'inherit' });
  if (run.status !== 0) throw new Error('building the console failed (npm run build:console)');
}
