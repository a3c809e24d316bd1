import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Keel's package.json, found upwards from this module (src/ under tsx, dist/src/ when built). */
function findPackage(): { version: string } {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) {
    const parent = dirname(dir);
    if (parent === dir) return { version: '0.0.0' };
    dir = parent;
  }
  return JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
}

export const VERSION = findPackage().version;
