import { ApiError } from '../errors.js';
import type { ItemKey } from './types.js';

export function alreadyExists(key: ItemKey): ApiError {
  const where = key.gvc ? ` in gvc '${key.gvc}'` : '';
  return new ApiError('already_exists', `${key.kind} '${key.name}' already exists${where}`);
}

export function staleVersion(key: ItemKey): ApiError {
  return ApiError.conflict(`${key.kind} '${key.name}' was changed by another request; the version sent is stale`);
}

/** A list or query stopped by the database for running past its budget (ListRequest.budgetMs). */
export function overBudget(ms: number): ApiError {
  return ApiError.badRequest(`the query ran longer than its budget of ${ms} ms (queryBudgetMs, KEEL_QUERY_BUDGET_MS); narrow it with more selective terms or a smaller limit`);
}
