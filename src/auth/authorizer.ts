import type { KindDef } from '../kinds/types.js';
import type { SqlParams } from '../store/sql.js';
import type { StoredItem } from '../store/types.js';
import type { Principal } from './principal.js';

/** What a permission check is about: a kind in an org, and the item when there is one. */
export interface Target {
  org: string;
  gvc?: string;
  name?: string;
  /** The target item's self link, when the caller has it at hand (else it is built from the above). */
  link?: string;
  /** The item's queryable fields (stored, or the would-be item of a create), for targetQuery matching; built only when needed. */
  fields?: () => Record<string, unknown>;
}

/**
 * Restricts a list to what the caller may view, or null for everything: `sql` gives a WHERE fragment
 * over `resources r` and, when `mayDrive`, perhaps a join that drives the scan (see
 * CompileOptions.drive); `matches` decides the same over a stored item, for lists answered from memory.
 */
export type ViewFilter = {
  sql: (params: SqlParams, mayDrive: boolean) => { where: string; join?: string };
  matches: (item: StoredItem) => boolean;
} | null;

/** How much of a kind a principal may view: every item, or at most the linked ones and those a query matches. */
export interface ViewScope {
  all: boolean;
  /** Self links of items granted by name. */
  links: Set<string>;
  /** Some policy grants by targetQuery (decided per item). */
  query: boolean;
}

/** One line of an access report: a principal a policy binding grants the permission to, and how the policy targets the item. */
export interface AccessEntry {
  principalLink: string;
  grantingPolicyLink: string;
  grantedPermissions: string[];
  match: 'all' | 'link' | 'query';
}

export interface Authorizer {
  /**
   * Throws 403 unless the principal belongs to the org (directly or through its groups and policies).
   * Like check(), it decides at once (returning nothing, or throwing) from what is already loaded, and
   * returns a promise only when it must load first: a hot path then need not wait for a settled answer.
   */
  requireMember(principal: Principal, org: string): void | Promise<void>;
  /** Throws 403 unless the principal holds `permission` on the target (see requireMember). */
  check(principal: Principal, permission: string, def: KindDef, target: Target): void | Promise<void>;
  /**
   * Whether some policy could grant one of `permissions` on the target, decided without the item's
   * fields (a policy targeting by query might): false means check() would refuse whatever the body
   * says, so a write can be refused before its body is read. Decides at once like requireMember.
   */
  mayHold(principal: Principal, permissions: string[], def: KindDef, target: Target): boolean | Promise<boolean>;
  viewFilter(principal: Principal, def: KindDef, org: string): Promise<ViewFilter>;
  /** Every kind of which the principal may view some items in the org (the kinds absent: none). */
  viewScope(principal: Principal, org: string): Promise<Map<string, ViewScope>>;
  /** For each permission of the kind, who holds it on the target and through which policy binding. */
  accessReport(def: KindDef, target: Target): Promise<Map<string, AccessEntry[]>>;
  /** Forgets cached decisions of an org after a write that can change them. */
  invalidate(org: string): void;
}
