// `npm install` / `npm ci` in a checkout (the prepare script) and `npm pack` leave a built Keel:
// dist/ is built when it is missing or older than a file it is built from, and left alone
// otherwise, so an install without changes costs nothing and `npm start` never builds.
// In an installed package (no sources beside dist/) there is nothing to do.
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const root = join(import.meta.dirname, '..');
const STAMP = join(root, 'dist', '.built');
// What `npm start` runs is built from these; the tests run from their sources, the bench builds itself.
const SOURCES = ['src', 'console', 'tsconfig.json', 'tsconfig.build.json', 'package.json', 'package-lock.json'];

function newest(path) {
  if (!existsSync(path)) return 0;
  const stat = statSync(path);
  if (!stat.isDirectory()) return stat.mtimeMs;
  let latest = 0;
  for (const entry of readdirSync(path)) latest = Math.max(latest, newest(join(path, entry)));
  return latest;
}

if (!existsSync(join(root, 'src'))) process.exit(0);
if (existsSync(STAMP) && statSync(STAMP).mtimeMs >= Math.max(...SOURCES.map((s) => newest(join(root, s))))) {
  console.error('keel: dist/ is up to date');
  process.exit(0);
}
console.error('keel: building dist/ (npm run build)');
const build = spawnSync('npm', ['run', 'build'], { cwd: root, stdio: ['ignore', 'inherit', 'inherit'] });
if (build.status !== 0) process.exit(build.status ?? 1);
// The bin npx links to must stay executable, though tsc writes it anew.
chmodSync(join(root, 'dist', 'src', 'cli.js'), 0o755);
writeFileSync(STAMP, `${new Date().toISOString()}\n`);
