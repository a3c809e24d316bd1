import { defineKind, standardPermissions } from './define.js';
import { newAlias } from './gvc.js';
import { anyObject, bool, int, keyed, num, obj, oneOf, readOnly, str } from './schema.js';

// Public types (types-ts dbcluster.ts): a managed PostgreSQL cluster across locations.
const size = () => oneOf(['developer-2c-4g', 'small-2c-8g', 'standard-4c-16g', 'large-8c-32g', 'xlarge-16c-64g']);

export default defineKind({
  kind: 'dbcluster',
  scope: 'org',
  summary: 'A managed PostgreSQL cluster replicated across locations.',
  fields: {
    alias: readOnly(str()),
    spec: obj({
      externalAccessEnabled: bool(),
      postgres: obj(
        {
          version: str({ maxLength: 16 }),
          storageGB: num({ minimum: 1 }),
          defaults: obj({ size: size(), instances: int({ minimum: 1 }) }, { required: ['size', 'instances'] }),
          locations: keyed(obj({ name: str({ maxLength: 512 }), writable: bool(), size: size(), instances: int({ minimum: 0 }) }), 'name', {
            maxItems: 50,
          }),
        },
        { required: ['storageGB'] },
      ),
    }),
    status: readOnly(anyObject()),
  },
  permissions: standardPermissions('database clusters'),
  defaults(item) {
    if (typeof item.alias !== 'string' || item.alias === '') item.alias = newAlias();
  },
});
