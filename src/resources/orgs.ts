import { createHash, randomUUID } from 'node:crypto';
import { mintKey } from '../auth/keys.js';
import { KINDS, findKind } from '../kinds/index.js';
import { LOCATIONS_CATALOG } from '../kinds/locations-catalog.js';
import type { Store, StoredItem, Tx } from '../store/types.js';
import { validateResource } from './validate.js';
import { changeEvent, type Actor } from '../audit/events.js';
import { present } from './present.js';
import { ApiError } from '../errors.js';
import type { Principal } from '../auth/principal.js';

/** Who may create orgs through the API (the `keel org create` command, run by the operator, is not bound by it). */
export interface OrgCreationRule {
  /** `superusers` (members of the first org's superusers group), `anyone`, principal links, emails. */
  creators: readonly string[];
  /** The org created on first start, whose superusers `superusers` means. */
  firstOrg: string;
  /** A principal already superuser of this many orgs may create no more (0: no limit). */
  maxPerPrincipal: number;
}

/**
 * Throws 403 unless the rule lets this principal create one more org. Every API route that creates
 * an org goes through Resources.createOrg, which asks this first.
 */
export async function requireOrgCreator(store: Store, principal: Principal, rule: OrgCreationRule): Promise<void> {
  const email = principal.kind === 'user' ? principal.name : undefined;
  const listed = rule.creators.some((c) => {
    if (c === 'anyone') return true;
    if (c === 'superusers') return false;
    if (email !== undefined) return c === email || c.endsWith(`/user/${email}`);
    return c === principal.link;
  });
  if (!listed && !(rule.creators.includes('superusers') && (await isSuperuser(store, principal, rule.firstOrg)))) {
    throw ApiError.forbidden(`this principal may not create orgs; the operator decides who may (orgCreators, KEEL_ORG_CREATORS: now ${rule.creators.join(',')})`);
  }
  if (rule.maxPerPrincipal <= 0) return;
  const candidates = email !== undefined ? await store.orgs() : await store.orgsNaming(principal.link);
  let held = 0;
  for (const org of candidates) if (await isSuperuser(store, principal, org)) held++;
  if (held >= rule.maxPerPrincipal) {
    throw new ApiError('quota_exceeded', `this principal is a superuser of ${held} orgs, the most it may hold to create another (maxOrgsPerPrincipal, KEEL_MAX_ORGS_PER_PRINCIPAL: ${rule.maxPerPrincipal})`);
  }
}

/** Whether the org's superusers group names the principal (a user by the link of its email in that org). */
async function isSuperuser(store: Store, principal: Principal, org: string): Promise<boolean> {
  const group = await store.get({ org, kind: 'group', gvc: '', name: 'superusers' });
  const members = (group?.data.memberLinks as string[] | undefined) ?? [];
  return members.includes(principal.kind === 'user' ? `/org/${org}/user/${principal.name}` : principal.link);
}

/** The id of the account that owns the orgs of a Keel whose first org is `org` (stable across restarts). */
export function accountIdOf(org: string): string {
  const h = createHash('sha256').update(`keel-account\u0000${org}`).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-8${h.slice(17, 20)}-${h.slice(20, 32)}`;
}

/** The link of the billing account that owns every org of a Keel whose first org is `org`. */
export const accountLinkOf = (org: string) => `/account/${accountIdOf(org)}`;

export interface NewOrg {
  name: string;
  /** Who creates it, for the audit log. */
  actor: Actor;
  description?: string;
  tags?: Record<string, unknown>;
  /** Principal links made members of the new org's superusers group. */
  superusers: string[];
  /** The billing account that owns the org (its status.accountLink): one account owns every org of a Keel. */
  accountLink: string;
  /** Users (emails) created in the new org. */
  users?: string[];
  /** Also create this service account in the org, add it to superusers and mint it a key. */
  adminServiceAccount?: string;
  /** The admin account's key, when it is given rather than minted (KEEL_ADMIN_KEY, or the bootstrap key a reset keeps). */
  adminKey?: { keyName: string; secretHash: string; token?: string };
  /** More of the org's status (a sandbox's expiry: status no client can write). */
  status?: Record<string, unknown>;
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
    ['org', org, { description: spec.description ?? org, tags: spec.tags ?? {}, status: { ...spec.status, accountLink: spec.accountLink } }],
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
