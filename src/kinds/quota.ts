import { defineKind, standardPermissions } from './define.js';
import { anyObject, num, oneOf, readOnly, str } from './schema.js';

// Public types (types-ts quota.ts): a limit (max) on a dimension of usage, with the current value.
export default defineKind({
  kind: 'quota',
  scope: 'org',
  summary: 'A limit on how much of something the org may use, with the amount currently used.',
  fields: {
    unit: str({ maxLength: 64 }),
    dimensions: anyObject(),
    max: num({ minimum: 0 }),
    current: readOnly(num()),
    origin: readOnly(oneOf(['default', 'builtin'])),
  },
  permissions: standardPermissions('quotas'),
  defaults(item) {
    item.origin ??= 'default';
  },
});
