import { ApiError } from '../errors.js';
import { findKind } from '../kinds/index.js';
import { grants } from '../kinds/derive.js';
import type { KindDef } from '../kinds/types.js';
import { asRows, compileQuery, matchesQuery, parseQuery, selects, type Query } from '../query/index.js';
import { parseLink, selfLink } from '../resources/links.js';
import type { SqlParams } from '../store/sql.js';
import type { Store, StoredItem } from '../store/types.js';
import type { AccessEntry, Authorizer, Target, ViewFilter, ViewScope } from './authorizer.js';
import { isMember, toGroup, type Group } from './membership.js';
import { requiredPermission } from './permissions.js';
import type { Principal } from './principal.js';

interface Binding {
  permissions: string[];
  principalLinks: string[];
}

interface Policy {
  link: string;
  targetKind: string;
  all: boolean;
  targetLinks: Set<string>;
  targetQuery?: Query;
  bindings: Binding[];
}

/** What one org says about access: its policies by target kind, its groups and its users. */
interface OrgAccess {
  exists: boolean;
  policies: Map<string, Policy[]>;
  groups: Group[];
  /** User items by link, for memberQuery and for JWT users' membership of the org. */
  users: Map<string, Record<string, unknown>>;
  /** Kinds with a targetQuery policy: their decisions depend on the item's fields, and are not remembered. */
  queryTargeted: Set<string>;
  /** Service accounts' decisions on other kinds, by target, principal and permission (see check). */
  decisions: Decisions;
  /** Service accounts' and identities' principalLinks (their groups are fixed for this snapshot), by link. */
  linksOf: Map<string, Set<string>>;
  loadedAt: number;
}

const DECISIONS = 10_000;

/**
 * Decisions by target, principal link and permission: nested maps rather than one key joined from the
 * three, so a lookup builds no string (and the strings, shared by every request, keep their hashes).
 */
class Decisions {
  private readonly byTarget = new Map<string, Map<string, Map<string, boolean>>>();
  private size = 0;

  get(target: string, principal: string, permission: string): boolean | undefined {
    return this.byTarget.get(target)?.get(principal)?.get(permission);
  }

  set(target: string, principal: string, permission: string, granted: boolean): void {
    if (this.size >= DECISIONS) {
      this.byTarget.clear();
      this.size = 0;
    }
    let byPrincipal = this.byTarget.get(target);
    if (!byPrincipal) this.byTarget.set(target, (byPrincipal = new Map()));
    let byPermission = byPrincipal.get(principal);
    if (!byPermission) byPrincipal.set(principal, (byPermission = new Map()));
    if (!byPermission.has(permission)) this.size++;
    byPermission.set(permission, granted);
  }
}

/** On SQLite: other processes' (the `keel` command's) policy, group and user changes are seen within this time. */
const FRESH_MS = 1000;

/**
 * Policy-based authorization (api-semantics §9): a principal holds a permission on an item when a
 * policy of the item's kind targets it (all, link or query) and binds a permission implying it to
 * the principal or to a group the principal is in. Decisions are computed from a per-org snapshot
 * that a local write invalidates at once. Where other processes share the database
 * (store.accessFeed) it is kept until a catch-up reports a change of the org's access, which every
 * request waits for before it is decided (server/app.ts); elsewhere it is reloaded after FRESH_MS.
 */
export class PolicyAuthorizer implements Authorizer {
  private readonly ready = new Map<string, OrgAccess>();
  private readonly loading = new Map<string, Promise<OrgAccess>>();
  /** Counts each org's invalidations, so a load that raced a write is not kept. */
  private readonly generations = new Map<string, number>();
  private readonly freshMs: number;

  /** `firstOrg`: the org whose superusers may create orgs, and so are told when one does not exist. */
  constructor(
    private readonly store: Store,
    private readonly firstOrg?: string,
  ) {
    this.freshMs = store.accessFeed ? Infinity : FRESH_MS;
  }

  invalidate(org: string): void {
    this.ready.delete(org);
    this.loading.delete(org);
    this.generations.set(org, (this.generations.get(org) ?? 0) + 1);
  }

  /** Forgets every org's decisions (the stored state was replaced); loads under way are not kept. */
  invalidateAll(): void {
    for (const org of new Set([...this.ready.keys(), ...this.loading.keys()])) this.invalidate(org);
  }

  requireMember(principal: Principal, org: string): void | Promise<void> {
    const access = this.access(org);
    if (access instanceof Promise) return access.then((loaded) => this.requireMemberIn(principal, org, loaded));
    return this.requireMemberIn(principal, org, access);
  }

  /** Anyone else is refused an org that does not exist as one they may not enter (403), learning nothing. */
  private requireMemberIn(principal: Principal, org: string, access: OrgAccess): void | Promise<void> {
    if (access.exists || !this.firstOrg || principal.org !== this.firstOrg) return this.requireMemberOf(principal, org, access);
    const superuser = this.inGroup(principal, this.firstOrg, 'superusers');
    const decide = (yes: boolean) => {
      if (yes) throw ApiError.notFound(`org '${org}' not found`);
      this.requireMemberOf(principal, org, access);
    };
    return superuser instanceof Promise ? superuser.then(decide) : decide(superuser);
  }

  /** Whether the org's group `group` has the principal as a member (decided at once from what is loaded, as requireMember is). */
  inGroup(principal: Principal, org: string, group: string): boolean | Promise<boolean> {
    const access = this.access(org);
    if (access instanceof Promise) return access.then((loaded) => this.principalLinks(principal, loaded).has(`/org/${org}/group/${group}`));
    return this.principalLinks(principal, access).has(`/org/${org}/group/${group}`);
  }

  private requireMemberOf(principal: Principal, org: string, access: OrgAccess): void {
    // A service account or a workload identity belongs to its org; a JWT user of the org must have been added to it.
    const own = principal.org === org && (principal.kind !== 'user' || access.users.has(principal.link));
    if (access.exists && own) return;
    const mentioned = this.principalLinks(principal, access);
    const named =
      [...mentioned].some((l) => l !== principal.link) ||
      [...access.policies.values()].some((ps) => ps.some((p) => p.bindings.some((b) => b.principalLinks.some((l) => mentioned.has(l)))));
    if (!access.exists || !named) throw ApiError.forbidden(`access to org '${org}' is denied`);
  }

  check(principal: Principal, permission: string, def: KindDef, target: Target): void | Promise<void> {
    const access = this.access(target.org);
    if (access instanceof Promise) return access.then((loaded) => this.checkIn(loaded, principal, permission, def, target));
    this.checkIn(access, principal, permission, def, target);
  }

  mayHold(principal: Principal, permissions: string[], def: KindDef, target: Target): boolean | Promise<boolean> {
    const access = this.access(target.org);
    if (access instanceof Promise) return access.then((loaded) => this.mayHoldIn(loaded, principal, permissions, def, target));
    return this.mayHoldIn(access, principal, permissions, def, target);
  }

  private mayHoldIn(access: OrgAccess, principal: Principal, permissions: string[], def: KindDef, target: Target): boolean {
    const principals = this.principalLinks(principal, access);
    const wanted = permissions.map((permission) => requiredPermission(def, permission));
    const link = target.name ? selfLink(def.kind, def.scope, target.org, target.gvc ?? '', target.name) : undefined;
    return (access.policies.get(def.kind) ?? []).some(
      (policy) =>
        (policy.all || policy.targetQuery !== undefined || (link ? policy.targetLinks.has(link) : policy.targetLinks.size > 0)) &&
        policy.bindings.some((b) => b.principalLinks.some((l) => principals.has(l)) && b.permissions.some((p) => wanted.some((w) => grants(def, p, w)))),
    );
  }

  private checkIn(access: OrgAccess, principal: Principal, permission: string, def: KindDef, target: Target): void {
    const wanted = requiredPermission(def, permission);
    const link = target.name ? (target.link ?? selfLink(def.kind, def.scope, target.org, target.gvc ?? '', target.name)) : undefined;
    // A service account's (or identity's) groups and the policies are fixed for this snapshot; without
    // a targetQuery, so is the answer for one permission on one target.
    const remembered = principal.kind !== 'user' && !access.queryTargeted.has(def.kind);
    let granted = remembered ? access.decisions.get(link ?? def.kind, principal.link, wanted) : undefined;
    if (granted === undefined) {
      granted = this.decide(principal, access, def, wanted, link, target);
      if (remembered) access.decisions.set(link ?? def.kind, principal.link, wanted, granted);
    }
    if (!granted) throw ApiError.forbidden(`not granted [${wanted}] on ${link ?? def.kind}`);
  }

  private decide(principal: Principal, access: OrgAccess, def: KindDef, wanted: string, link: string | undefined, target: Target): boolean {
    const principals = this.principalLinks(principal, access);
    let fields: Record<string, unknown> | undefined;
    for (const policy of access.policies.get(def.kind) ?? []) {
      if (!policy.bindings.some((b) => b.permissions.some((p) => grants(def, p, wanted)) && b.principalLinks.some((l) => principals.has(l)))) continue;
      if (policy.all) return true;
      if (link && policy.targetLinks.has(link)) return true;
      if (policy.targetQuery && target.fields && matchesQuery(policy.targetQuery, (fields ??= target.fields()), { gvc: target.gvc })) return true;
    }
    return false;
  }

  async viewFilter(principal: Principal, def: KindDef, org: string): Promise<ViewFilter> {
    const access = await this.access(org);
    const principals = this.principalLinks(principal, access);
    const wanted = requiredPermission(def, 'view');
    const granting = (access.policies.get(def.kind) ?? []).filter((policy) =>
      policy.bindings.some((b) => b.permissions.some((p) => grants(def, p, wanted)) && b.principalLinks.some((l) => principals.has(l))),
    );
    if (granting.some((p) => p.all)) return null;
    // A single targetQuery, and nothing else, may drive the scan.
    const only = granting.length === 1 && granting[0].targetLinks.size === 0 ? granting[0].targetQuery : undefined;
    const sql = (params: SqlParams, mayDrive: boolean) => {
      if (only && mayDrive) {
        const { where, join } = compileQuery(only, params, { org, drive: true });
        return { where, join };
      }
      const clauses: string[] = [];
      const names = new Map<string, string[]>(); // gvc -> names
      for (const policy of granting) {
        for (const link of policy.targetLinks) {
          const t = parseLink(link);
          if (!t || t.kind !== def.kind || t.org !== org) continue;
          const gvc = t.gvc ?? '';
          names.set(gvc, [...(names.get(gvc) ?? []), t.name]);
        }
        if (policy.targetQuery) clauses.push(`(${compileQuery(policy.targetQuery, params, { org }).where})`);
      }
      for (const [gvc, list] of names) {
        clauses.push(`(r.gvc = ${params.add(gvc)} AND r.name IN (${list.map((n) => params.add(n)).join(', ')}))`);
      }
      return { where: clauses.length ? clauses.join(' OR ') : '1 = 0' };
    };
    // As `sql` decides: by (gvc, name) for the links of this kind in this org, or by a targetQuery.
    const named = new Set<string>();
    for (const policy of granting) {
      for (const link of policy.targetLinks) {
        const t = parseLink(link);
        if (t && t.kind === def.kind && t.org === org) named.add(`${t.gvc ?? ''}\u0000${t.name}`);
      }
    }
    const queries = granting.flatMap((policy) => (policy.targetQuery ? [selects(policy.targetQuery)] : []));
    const matches = (item: StoredItem) => named.has(`${item.gvc}\u0000${item.name}`) || queries.some((q) => q(item));
    return { sql, matches };
  }

  async viewScope(principal: Principal, org: string): Promise<Map<string, ViewScope>> {
    const access = await this.access(org);
    const principals = this.principalLinks(principal, access);
    const scopes = new Map<string, ViewScope>();
    for (const [kind, policies] of access.policies) {
      const def = findKind(kind)!;
      const wanted = requiredPermission(def, 'view');
      for (const policy of policies) {
        if (!policy.bindings.some((b) => b.permissions.some((p) => grants(def, p, wanted)) && b.principalLinks.some((l) => principals.has(l)))) continue;
        let scope = scopes.get(kind);
        if (!scope) scopes.set(kind, (scope = { all: false, links: new Set(), query: false }));
        scope.all ||= policy.all;
        scope.query ||= Boolean(policy.targetQuery);
        for (const link of policy.targetLinks) scope.links.add(link);
      }
    }
    return scopes;
  }

  async accessReport(def: KindDef, target: Target): Promise<Map<string, AccessEntry[]>> {
    const access = await this.access(target.org);
    const link = target.name ? selfLink(def.kind, def.scope, target.org, target.gvc ?? '', target.name) : undefined;
    const fields = target.fields?.();
    const report = new Map<string, AccessEntry[]>(def.permissions.map((p) => [p.name, []]));
    for (const policy of access.policies.get(def.kind) ?? []) {
      const match = policy.all
        ? 'all'
        : link && policy.targetLinks.has(link)
          ? 'link'
          : policy.targetQuery && fields && matchesQuery(policy.targetQuery, fields, { gvc: target.gvc })
            ? 'query'
            : undefined;
      if (!match) continue;
      for (const binding of policy.bindings) {
        for (const [permission, entries] of report) {
          if (!binding.permissions.some((p) => grants(def, p, permission))) continue;
          for (const principalLink of binding.principalLinks) {
            entries.push({ principalLink, grantingPolicyLink: policy.link, grantedPermissions: binding.permissions, match });
          }
        }
      }
    }
    return report;
  }

  /** The principal's own link and the links of the org's groups it belongs to (shared: callers must not change it). */
  private principalLinks(principal: Principal, access: OrgAccess): Set<string> {
    // A JWT user's groups depend on its claims, which each token brings; anyone else's only on the snapshot.
    const remembered = principal.kind !== 'user';
    let links = remembered ? access.linksOf.get(principal.link) : undefined;
    if (links) return links;
    links = new Set([principal.link]);
    const user = principal.kind === 'user' ? access.users.get(principal.link) : undefined;
    for (const group of access.groups) if (isMember(group, principal, user)) links.add(group.link);
    if (remembered) {
      if (access.linksOf.size >= DECISIONS) access.linksOf.clear();
      access.linksOf.set(principal.link, links);
    }
    return links;
  }

  /** The org's snapshot: the fresh one at hand, or one being loaded (a write since the load began makes it reload). */
  private access(org: string): OrgAccess | Promise<OrgAccess> {
    const ready = this.ready.get(org);
    if (ready && (this.freshMs === Infinity || Date.now() - ready.loadedAt < this.freshMs)) return ready;
    const pending = this.loading.get(org);
    if (pending) return pending;
    const generation = this.generations.get(org) ?? 0;
    const loading = this.load(org).then(
      (snapshot) => {
        if (this.loading.get(org) === loading) this.loading.delete(org);
        if ((this.generations.get(org) ?? 0) === generation) this.ready.set(org, snapshot);
        return snapshot;
      },
      (err) => {
        if (this.loading.get(org) === loading) this.loading.delete(org);
        throw err;
      },
    );
    this.loading.set(org, loading);
    return loading;
  }

  private async load(org: string): Promise<OrgAccess> {
    const loadedAt = Date.now();
    const orgItem = await this.store.get({ org, kind: 'org', gvc: '', name: org });
    const all = (kind: string) =>
      this.store.list({ org, kind, gvc: '', limit: 100_000, build: () => ({ where: '1 = 1', orderBy: 'r.name' }) });
    const [policyRows, groupRows, userRows] = orgItem ? await Promise.all([all('policy'), all('group'), all('user')]) : [[], [], []];
    const policies = new Map<string, Policy[]>();
    for (const row of policyRows) {
      const policy = toPolicy(row);
      if (!policy) continue;
      policies.set(policy.targetKind, [...(policies.get(policy.targetKind) ?? []), policy]);
    }
    const users = new Map(userRows.map((row) => [`/org/${org}/user/${row.name}`, { ...row.data, id: row.id, name: row.name, created: row.created, lastModified: row.lastModified }]));
    const queryTargeted = new Set([...policies].filter(([, list]) => list.some((p) => p.targetQuery)).map(([kind]) => kind));
    return { exists: Boolean(orgItem), policies, groups: groupRows.map(toGroup), users, queryTargeted, decisions: new Decisions(), linksOf: new Map(), loadedAt };
  }
}

function toPolicy(row: StoredItem): Policy | undefined {
  const d = row.data;
  const targetKind = typeof d.targetKind === 'string' ? d.targetKind : undefined;
  const def = targetKind ? findKind(targetKind) : undefined;
  if (!targetKind || !def) return undefined;
  let targetQuery: Query | undefined;
  if (d.targetQuery) {
    try {
      targetQuery = asRows(parseQuery(d.targetQuery, def));
    } catch {
      targetQuery = undefined; // a stored query that no longer parses grants nothing
    }
  }
  return {
    link: `/org/${row.org}/policy/${row.name}`,
    targetKind,
    all: d.target === 'all',
    targetLinks: new Set((d.targetLinks as string[] | undefined) ?? []),
    targetQuery,
    bindings: ((d.bindings as Binding[] | undefined) ?? []).map((b) => ({ permissions: b.permissions ?? [], principalLinks: b.principalLinks ?? [] })),
  };
}
