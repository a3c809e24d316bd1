import jmespath from 'jmespath';
import user from '../kinds/user.js';
import { matchesQuery, parseQuery, type Query } from '../query/index.js';
import type { StoredItem } from '../store/types.js';
import type { Principal } from './principal.js';

/** A group as membership sees it (api-semantics §9.2). */
export interface Group {
  link: string;
  memberLinks: Set<string>;
  /** Users matching it are members. */
  memberQuery?: Query;
  /** A JMESPath expression over a JWT user's claims; a truthy result makes the user a member. */
  identityMatcher?: string;
}

export function toGroup(row: StoredItem): Group {
  const d = row.data;
  let memberQuery: Query | undefined;
  if (d.memberQuery) {
    try {
      memberQuery = parseQuery(d.memberQuery, user);
    } catch {
      memberQuery = undefined; // a stored query that no longer parses matches no one
    }
  }
  const matcher = d.identityMatcher as { expression?: unknown; language?: unknown } | undefined;
  // Only JMESPath is evaluated; a `javascript` matcher is stored but matches no one (Keel runs no user code).
  const identityMatcher = matcher && (matcher.language ?? 'jmespath') === 'jmespath' && typeof matcher.expression === 'string' ? matcher.expression : undefined;
  return { link: `/org/${row.org}/group/${row.name}`, memberLinks: new Set((d.memberLinks as string[] | undefined) ?? []), memberQuery, identityMatcher };
}

/** Whether the principal is a member of the group; `user` is the principal's user item in the group's org, if any. */
export function isMember(group: Group, principal: Principal, user: Record<string, unknown> | undefined): boolean {
  if (group.memberLinks.has(principal.link)) return true;
  if (principal.kind !== 'user') return false;
  if (group.memberQuery && user && matchesQuery(group.memberQuery, user)) return true;
  return Boolean(group.identityMatcher && principal.claims && matchesClaims(group.identityMatcher, principal.claims));
}

function matchesClaims(expression: string, claims: Record<string, unknown>): boolean {
  try {
    const result: unknown = jmespath.search(claims, expression);
    return !(result === null || result === undefined || result === false || result === '' || (Array.isArray(result) && result.length === 0) || (typeof result === 'object' && Object.keys(result as object).length === 0));
  } catch {
    return false; // an expression that fails on these claims matches no one
  }
}

/** The parse error of an expression, or undefined when it is valid JMESPath. */
export function jmespathError(expression: string): string | undefined {
  try {
    (jmespath as unknown as { compile(expression: string): unknown }).compile(expression); // parses without evaluating
    return undefined;
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  }
}
