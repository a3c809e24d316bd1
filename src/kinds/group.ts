import { jmespathError } from '../auth/membership.js';
import { ApiError } from '../errors.js';
import { refuseBuiltinDelete } from './builtin.js';
import { defineKind, standardPermissions } from './define.js';
import { anyObject, arr, link, obj, oneOf, querySchema, readOnly, str } from './schema.js';

// Seed 2.4 and 4.1. Members: memberLinks (users and service accounts), users matching
// memberQuery, and JWT users whose claims satisfy identityMatcher (a JMESPath expression).
export default defineKind({
  kind: 'group',
  scope: 'org',
  summary: 'A set of users and service accounts that policies grant permissions to.',
  fields: {
    memberLinks: arr(link(), { maxItems: 1000 }),
    memberQuery: querySchema(),
    identityMatcher: obj({ expression: str({ maxLength: 4096 }), language: oneOf(['jmespath', 'javascript']) }),
    origin: readOnly(oneOf(['synthetic', 'default', 'builtin'])),
    status: readOnly(anyObject()),
  },
  permissions: standardPermissions('groups'),
  defaults(item) {
    item.origin ??= 'default';
  },
  check(item, ctx, previous) {
    const matcher = item.identityMatcher as { expression?: string; language?: string } | undefined;
    const error = matcher?.expression !== undefined && (matcher.language ?? 'jmespath') === 'jmespath' ? jmespathError(matcher.expression) : undefined;
    if (error) throw ApiError.badRequest(`identityMatcher.expression is not valid JMESPath: ${error}`, [{ path: 'identityMatcher.expression', message: error }]);
    // Locking oneself out of the org's administration is refused (api-semantics §9.5).
    const caller = ctx.principal?.link;
    const had = (previous?.memberLinks as string[] | undefined) ?? [];
    const has = (item.memberLinks as string[] | undefined) ?? [];
    if (previous?.name === 'superusers' && previous.origin === 'builtin' && caller && had.includes(caller) && !has.includes(caller)) {
      throw ApiError.forbidden(`you cannot remove yourself (${caller}) from the superusers group`);
    }
  },
  beforeDelete(item) {
    refuseBuiltinDelete(item);
  },
});
