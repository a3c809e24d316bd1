import { randomUUID } from 'node:crypto';
import { mintKey } from '../auth/keys.js';
import { KINDS, findKind } from '../kinds/index.js';
import { LOCATIONS_CATALOG } from '../kinds/locations-catalog.js';
import type { Store, StoredItem, Tx } from '../store/types.js';
import { validateResource } from './validate.js';
import { changeEvent, type Actor } from '../audit/events.js';
import { present } from './present.js';

export interface NewOrg {
  name: string;
  /** Who creates it, for the audit log. */
  actor: Actor;
  description?: string;
  tags?: Record<string, unknown>;
  /** Principal links made members of the new org's superusers group. */
  superusers: string[];
  /** Users (emails) created in the new org. */
  users?: string[];
  /** Also create this service account in the org, add it to superusers and mint it a key. */
  adminServiceAccount?: string;
  /** The admin account's key, when it is given rather than minted (KEEL_ADMIN_KEY, or the bootstrap key a reset keeps). */
  adminKey?: { keyName: string; secretHash: string; token?: string };
}

/**
 * Creates an org with its built-ins in one transaction: groups superusers and viewers, service
 * account controlplane, audit context cpln, the location catalog and, for every kind, the
 * policies superusers-<kind> (manage) and viewers-<kind> (view). Returns the admin key if asked.
 */
export async function createOrg(store: Store, spec: NewOrg): Promise<{ token?: string }> {
  const org = spec.name;
  const superusers = [...spec.superusers];
  if (spec.adminServiceAccount) superusers.push(`/org/${org}/serviceaccount/${spec.adminServiceAccount}`);
  const now = new Date().toISOString();
  const items: Array<[string, string, Record<string, unknown>]> = [
    ['org', org, { description: spec.description ?? org, tags: spec.tags ?? {} }],
    ['group', 'superusers', { description: 'Members have full access to the org', memberLinks: superusers, origin: 'builtin' }],
    ['group', 'viewers', { description: 'Members can view everything in the org', memberLinks: [], origin: 'builtin' }],
    ['serviceaccount', 'controlplane', { description: 'The control plane itself', keys: [], origin: 'builtin' }],
    ['auditctx', 'cpln', { description: 'Audit events of the platform', origin: 'builtin' }],
    ...(spec.users ?? []).map((email): [string, string, Record<string, unknown>] => ['user', email, { email, description: email }]),
    ...LOCATIONS_CATALOG.map((l): [string, string, Record<string, unknown>] => ['location', l.name, { ...l, origin: 'builtin' }]),
  ];
  for (const def of KINDS) {
    if (def.permissions.length === 0) continue;
    items.push(
      ['policy', `superusers-${def.kind}`, builtinPolicy(org, def.kind, 'manage', [`/org/${org}/group/superusers`, `/org/${org}/serviceaccount/controlplane`])],
      ['policy', `viewers-${def.kind}`, builtinPolicy(org, def.kind, 'view', [`/org/${org}/group/viewers`])],
    );
  }
  let token: string | undefined;
  await store.transaction(async (tx) => {
    const inserted: StoredItem[] = [];
    for (const [kind, name, data] of items) inserted.push(await insert(tx, org, kind, name, data, now));
    if (spec.adminServiceAccount) {
      const key = spec.adminKey ?? mintKey(org, spec.adminServiceAccount);
      const keys = [{ name: key.keyName, description: 'bootstrap admin key', created: now }];
      inserted.push(await insert(tx, org, 'serviceaccount', spec.adminServiceAccount, { description: 'Keel administrator', keys, origin: 'default' }, now));
      await tx.putKey({ keyName: key.keyName, org, serviceAccount: spec.adminServiceAccount, secretHash: key.secretHash, created: now });
      token = key.token;
    }
    // One event for the org (its built-ins come with it) and one for an admin account made with it.
    for (const item of inserted.filter((i) => i.kind === 'org' || i.name === spec.adminServiceAccount)) {
      await tx.appendAudit(changeEvent(org, spec.actor, 'create', present(findKind(item.kind)!, item)));
    }
  });
  return { token };
}

function builtinPolicy(org: string, kind: string, permission: string, principalLinks: string[]): Record<string, unknown> {
  return {
    description: `Built-in: ${permission} on every ${kind}`,
    targetKind: kind,
    target: 'all',
    bindings: [{ permissions: [permission], principalLinks }],
    origin: 'builtin',
  };
}

async function insert(tx: Tx, org: string, kind: string, name: string, data: Record<string, unknown>, now: string): Promise<StoredItem> {
  const body = { name, tags: {}, ...data };
  validateResource(findKind(kind)!, body);
  const item: StoredItem = { org, kind, gvc: '', name, id: randomUUID(), version: 1, created: now, lastModified: now, data: body };
  await tx.insert(item);
  return item;
}
