// The side menu's groups, as data: which kinds a person manages where. Kinds the server computes or
// keeps for its own bookkeeping are left out (their URLs still open); a kind in neither list (a new
// one) shows under Other, so it is reachable without a change here.
import type { KindInfo } from './api';

/** Computed views, server-written records, shapes of query answers and children of other items. */
const INTERNAL = new Set([
  'org',
  'permissions',
  'accessreport',
  'deployment',
  'event',
  'command',
  'policymembership',
  'imagesummary',
  'link',
  'foreign',
  'primitive',
  'resource',
  'account',
  'tenant',
]);

/** Each group's kinds in menu order, and pages of the org that are not a kind (under /org/{org}/). */
const GROUPS: Array<{ title: string; kinds: string[]; pages?: Page[] }> = [
  { title: 'Workloads', kinds: ['gvc', 'workload', 'identity', 'volumeset'] },
  { title: 'Access', kinds: ['serviceaccount', 'user', 'group', 'policy', 'task'], pages: [{ label: 'audit trail', path: '-audit' }] },
  { title: 'Platform', kinds: ['secret', 'domain', 'image', 'location', 'cloudaccount', 'agent', 'ipset', 'quota', 'auditctx', 'resourcepolicy', 'dbcluster', 'memcachecluster', 'spicedbcluster', 'mk8s'] },
];

export interface Page {
  label: string;
  path: string;
}

export interface MenuGroup {
  title: string;
  pages: Page[];
  /** Kinds of the org, then (listed under the current GVC) kinds inside a GVC. */
  org: KindInfo[];
  gvc: KindInfo[];
}

/** The registry's kinds that clients may change, in menu groups in the table's order; unknown ones go to Other. */
export function menuOf(registry: KindInfo[]): MenuGroup[] {
  const shown = registry.filter((k) => !INTERNAL.has(k.kind) && (k.operations.create || k.operations.update || k.operations.delete));
  const placed = new Set(GROUPS.flatMap((g) => g.kinds));
  const groups = [...GROUPS, { title: 'Other', kinds: shown.filter((k) => !placed.has(k.kind)).map((k) => k.kind) }];
  return groups
    .map(({ title, kinds, pages = [] }) => {
      const members = kinds.map((name) => shown.find((k) => k.kind === name)).filter((k): k is KindInfo => Boolean(k));
      return { title, pages, org: members.filter((k) => k.scope === 'org'), gvc: members.filter((k) => k.scope === 'gvc') };
    })
    .filter((g) => g.org.length || g.gvc.length || g.pages.length);
}
