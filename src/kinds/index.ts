// The kind registry: every kind of seed section 1, declared once in its own module.
// Everything generic (schemas with the common fields, permission tables, routes) is derived here.
import type { KindDef } from './types.js';

import accessreport from './accessreport.js';
import account from './account.js';
import agent from './agent.js';
import auditctx from './auditctx.js';
import cloudaccount from './cloudaccount.js';
import command from './command.js';
import dbcluster from './dbcluster.js';
import deployment from './deployment.js';
import domain from './domain.js';
import event from './event.js';
import foreign from './foreign.js';
import group from './group.js';
import gvc from './gvc.js';
import identity from './identity.js';
import image from './image.js';
import imagesummary from './imagesummary.js';
import ipset from './ipset.js';
import link from './link.js';
import location from './location.js';
import memcachecluster from './memcachecluster.js';
import mk8s from './mk8s.js';
import org from './org.js';
import permissions from './permissions.js';
import policy from './policy.js';
import policymembership from './policymembership.js';
import primitive from './primitive.js';
import quota from './quota.js';
import resource from './resource.js';
import resourcepolicy from './resourcepolicy.js';
import secret from './secret.js';
import serviceaccount from './serviceaccount.js';
import spicedbcluster from './spicedbcluster.js';
import task from './task.js';
import tenant from './tenant.js';
import user from './user.js';
import volumeset from './volumeset.js';
import workload from './workload.js';

export const KINDS: readonly KindDef[] = [
  org, cloudaccount, policy, user, group, resource, task, permissions, serviceaccount, secret, location, gvc,
  workload, quota, identity, deployment, event, account, domain, image, ipset, resourcepolicy, accessreport,
  agent, auditctx, dbcluster, memcachecluster, spicedbcluster, tenant, mk8s, command, policymembership,
  primitive, foreign, link, imagesummary, volumeset,
];

const byName = new Map(KINDS.map((k) => [k.kind, k]));

export function findKind(kind: string): KindDef | undefined {
  return byName.get(kind);
}

export { COMMON_READ_ONLY, resourceSchema, impliedPermissions, grants } from './derive.js';
