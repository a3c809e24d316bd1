import { at, fail } from './errors.js';
import { isPlainObject } from '../json.js';

export const MAX_DEPTH = 64;

/**
 * Rejects a patch nested deeper than MAX_DEPTH before anything recurses over it; the walk
 * itself uses an explicit stack so a hostile body cannot overflow the call stack here.
 */
export function checkDepth(patch: unknown): void {
  const stack: Array<{ value: unknown; depth: number; path: string }> = [{ value: patch, depth: 1, path: '' }];
  while (stack.length) {
    const { value, depth, path } = stack.pop()!;
    const children: Array<[string, unknown]> = Array.isArray(value)
      ? value.map((item, i): [string, unknown] => [`${path}[${i}]`, item])
      : isPlainObject(value)
        ? Object.keys(value).map((k): [string, unknown] => [at(path, k), value[k]])
        : [];
    for (const [childPath, child] of children) {
      if (typeof child !== 'object' || child === null) continue;
      if (depth + 1 > MAX_DEPTH) fail(childPath, `is nested deeper than ${MAX_DEPTH} levels`);
      stack.push({ value: child, depth: depth + 1, path: childPath });
    }
  }
}
