import { ApiError } from '../errors.js';
import { refuseBuiltinDelete, refuseBuiltinUpdate } from './builtin.js';
import { checkQuery, defineKind, standardPermissions } from './define.js';
import { arr, KIND_NAMES, link, obj, oneOf, querySchema, readOnly, str } from './schema.js';

// api-semantics §9.1: one targetKind; target all, links or a query; up to 50 bindings of
// 1..200 principals each, every binding with its own permission set. Permission names and
// principal links are stored as sent (a wrong one simply grants nothing, as on the hosted service).

/** The kinds of seed section 1 (kept here so this module does not import the registry). */

export default defineKind({
  kind: 'policy',
  scope: 'org',
  summary: 'Grants permissions on resources of one kind (all of them, listed ones, or those a query matches) to principals.',
  fields: {
    targetKind: oneOf(KIND_NAMES),
    target: oneOf(['all']),
    targetLinks: arr(link(), { maxItems: 200 }),
    targetQuery: querySchema(),
    bindings: arr(
      obj(
        {
          permissions: arr(str({ minLength: 1, maxLength: 64 }), { minItems: 1, maxItems: 100 }),
          principalLinks: arr(link(), { minItems: 1, maxItems: 200 }),
        },
        { required: ['permissions', 'principalLinks'] },
      ),
      { maxItems: 50 },
    ),
    origin: readOnly(oneOf(['default', 'builtin'])),
  },
  required: ['targetKind'],
  permissions: standardPermissions('policies'),
  defaults(item) {
    item.origin ??= 'default';
  },
  check(item, ctx, previous) {
    refuseBuiltinUpdate(previous);
    const targetKind = item.targetKind as string;
    if (item.targetQuery !== undefined) checkQuery(item.targetQuery, ctx.kind(targetKind) ?? { kind: targetKind }, 'targetQuery');
    const bindings = (item.bindings ?? []) as Array<{ permissions: string[] }>;
    const seen = new Map<string, number>();
    bindings.forEach((binding, index) => {
      const key = [...new Set(binding.permissions)].sort().join(',');
      const first = seen.get(key);
      if (first !== undefined) {
        throw ApiError.badRequest(`bindings[${first}] and bindings[${index}] grant the same permissions; merge their principals into one binding`, [
          { path: `bindings[${index}].permissions`, message: 'duplicates the permission set of another binding' },
        ]);
      }
      seen.set(key, index);
    });
  },
  beforeDelete(item) {
    refuseBuiltinDelete(item);
  },
});
