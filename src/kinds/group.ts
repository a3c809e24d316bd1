import { refuseBuiltinDelete } from './builtin.js';
import { defineKind, standardPermissions } from './define.js';
import { anyObject, arr, link, obj, oneOf, querySchema, readOnly, str } from './schema.js';

// Seed 2.4 and 4.1.
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
  beforeDelete(item) {
    refuseBuiltinDelete(item);
  },
});
