import { refuseBuiltinDelete, refuseBuiltinUpdate } from './builtin.js';
import { defineKind, standardPermissions } from './define.js';
import { keyed, obj, oneOf, readOnly, str } from './schema.js';

// api-semantics §10: keys are minted by POST …/-addKey (which writes this list and the key's
// hash), listed here as {name, created, description}, and revoked by removing them from the
// list (`$drop/keys`, as `cpln serviceaccount remove-key` and Terraform send). `keys` is
// therefore not read-only: the patch engine ignores directives on read-only fields. Listing a
// key grants nothing (only the key store authenticates); afterWrite revokes every stored key
// that is no longer listed, and all of them when the service account is deleted. A key entry is a
// closed object (name, created, description): the hashes live only in the key store, which no
// read or query touches.

interface KeyEntry {
  name: string;
  created?: string;
  description?: string;
}

const keyNames = (keys: unknown): string[] =>
  Array.isArray(keys) ? (keys as KeyEntry[]).map((k) => k.name).filter((n): n is string => typeof n === 'string') : [];

export default defineKind({
  kind: 'serviceaccount',
  scope: 'org',
  summary: 'A non-human principal that authenticates with keys; used by automation and CI.',
  fields: {
    keys: keyed(
      // `key` is the secret that -addKey answers once; it is never stored, so a client's value is dropped.
      obj(
        { name: str({ minLength: 1, maxLength: 64 }), created: readOnly(str({ maxLength: 64 })), description: str({ maxLength: 250 }), key: readOnly(str()) },
        { required: ['name'] },
      ),
      'name',
      { maxItems: 100 },
    ),
    origin: readOnly(oneOf(['default', 'builtin'])),
  },
  permissions: standardPermissions('service accounts', [
    { name: 'addKey', description: 'Add a key to an existing service account' },
  ]),
  defaults(item) {
    item.origin ??= 'default';
  },
  check(item, _ctx, previous) {
    refuseBuiltinUpdate(previous);
    // A replace (PUT/apply) that leaves `keys` out keeps the existing keys; it does not revoke them.
    if (item.keys === undefined) item.keys = previous?.keys ?? [];
    // A replace drops the read-only `created` of listed keys: it is the server's, so restore it.
    const before = new Map((Array.isArray(previous?.keys) ? (previous.keys as KeyEntry[]) : []).map((k) => [k.name, k]));
    if (Array.isArray(item.keys)) {
      item.keys = (item.keys as KeyEntry[]).map((k) => {
        const created = before.get(k.name)?.created ?? k.created;
        return created === undefined ? k : { ...k, created };
      });
    }
  },
  async afterWrite(name, item, ctx) {
    await ctx.revokeKeysExcept(name, item ? keyNames(item.keys) : []);
  },
  beforeDelete(item) {
    refuseBuiltinDelete(item);
  },
});
