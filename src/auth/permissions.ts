import type { KindDef } from '../kinds/types.js';

/**
 * The permission a policy must grant for an operation. Users have no `create` permission: an admin
 * adds a user by inviting them, so creating one needs `invite`. An operation whose permission a
 * kind does not list (creating a `link`, editing a `command`) is governed by `manage`, which
 * implies everything on the kind, so such items stay manageable by superusers and no one else.
 */
export function requiredPermission(def: KindDef, permission: string): string {
  if (def.kind === 'user' && permission === 'create') return 'invite';
  return def.permissions.some((p) => p.name === permission) ? permission : 'manage';
}
