import { ApiError } from '../errors.js';

// Items the server seeds into every org carry `origin: 'builtin'` (groups superusers/viewers, the
// controlplane service account, the superusers-K/viewers-K policies, the cpln audit context, the
// cloud locations). Clients may never delete them; some kinds also refuse edits.

interface Classified {
  kind?: unknown;
  name?: unknown;
  origin?: unknown;
}

export function isBuiltin(item: Classified | undefined): boolean {
  return item?.origin === 'builtin';
}

/** For `beforeDelete`: a built-in item cannot be deleted (403). */
export function refuseBuiltinDelete(item: Classified): void {
  if (isBuiltin(item)) {
    throw ApiError.forbidden(`${String(item.kind ?? 'item')} '${String(item.name)}' is built in and cannot be deleted`);
  }
}

/** For `check` on an update (previous given): a built-in item of this kind cannot be changed (400, as immutable fields). */
export function refuseBuiltinUpdate(previous: Classified | undefined): void {
  if (previous && isBuiltin(previous)) {
    throw ApiError.badRequest(`${String(previous.kind ?? 'item')} '${String(previous.name)}' is built in and cannot be modified`);
  }
}
