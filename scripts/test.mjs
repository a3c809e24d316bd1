// Runs every *.test.ts under test/ with node's test runner (TypeScript through tsx).
// Extra arguments narrow the run: `npm test -- test/patch`.
import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';

function collect(path, out) {
  if (statSync(path).isDirectory()) {
    for (const entry of readdirSync(path).sort()) collect(join(path, entry), out);
  } else if (path.endsWith('.test.ts')) {
    out.push(path);
  }
  return out;
}

const roots = process.argv.slice(2).length ? process.argv.slice(2) : ['test'];
const files = roots.flatMap((root) => collect(root, []));
if (files.length === 0) {
  console.error('no test files found under', roots.join(' '));
  process.exit(1);
}
const reporters = [
  '--test-reporter=tap', '--test-reporter-destination=stdout',
  `--test-reporter=${new URL('./failures.mjs', import.meta.url).pathname}`, '--test-reporter-destination=stdout',
];
const result = spawnSync(process.execPath, ['--import', 'tsx', '--test', ...reporters, ...files], { stdio: 'inherit' });
process.exit(result.status ?? 1);
