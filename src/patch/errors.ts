import { ApiError } from '../errors.js';

/** Dotted path of a field or directive inside the patch body (`spec.$patch/containers[0]`). */
export function at(path: string, key: string): string {
  return path ? `${path}.${key}` : key;
}

export function fail(path: string, message: string): never {
  throw ApiError.badRequest(`invalid patch: ${path || '(body)'} ${message}`, [{ path, message }]);
}
