import { defineKind, standardPermissions } from './define.js';
import { anyObject, arr, bool, int, link, num, obj, readOnly, str } from './schema.js';

// Public types (types-ts memcache.ts).
export default defineKind({
  kind: 'memcachecluster',
  scope: 'org',
  summary: 'A managed memcached cluster available to workloads in chosen locations.',
  fields: {
    spec: obj(
      {
        nodeCount: int({ minimum: 1 }),
        nodeSizeGiB: num({ minimum: 0 }),
        version: str({ maxLength: 16 }),
        options: obj({
          evictionsDisabled: bool(),
          idleTimeoutSeconds: int({ minimum: 0 }),
          maxItemSizeKiB: int({ minimum: 1 }),
          maxConnections: int({ minimum: 1 }),
        }),
        locations: arr(link(), { maxItems: 50 }),
      },
      { required: ['nodeCount', 'nodeSizeGiB'] },
    ),
    status: readOnly(anyObject()),
  },
  required: ['spec'],
  permissions: standardPermissions('memcache clusters'),
});
