// The billing service the clients find as /discovery `billing-ng` (Keel itself): one billing
// account owns every org of this Keel, and orgs are created through it as the CLI's
// `org create` and Terraform's cpln_org do. A caller sees the account only as the account of its
// own orgs (those it belongs to or may view), with only those orgs in it:
//   GET  /account                 {kind: list, itemKind: account, items: [the caller's account]}
//   GET  /account/{id}            the account (404 unless it is the caller's)
//   POST /account/{id}/org        {org: {name, description?, tags?}, invitees: [emails]} → 201 + the org
// Org creation goes through the same service call as POST /org (its checks and who may create
// orgs apply unchanged); invitees become users of the new org and members of its superusers.
// Keel keeps no invoices, payment methods or usage: the account's other routes answer a clear 400.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Principal } from '../auth/principal.js';
import { ApiError } from '../errors.js';
import { findKind } from '../kinds/index.js';
import type { Resource } from '../kinds/types.js';
import type { Resources } from '../resources/service.js';
import type { Store } from '../store/types.js';
import { refusedRoute } from './docs.js';
import { notServed } from './errors.js';
import { permissionSchema } from './routes.js';

const EMAIL = /^[^\s@/]+@[^\s@/]+$/;

export function mountBilling(app: FastifyInstance, resources: Resources, store: Store): void {
  const started = new Date().toISOString();
  /**
   * The accounts of the caller's own orgs (the org its key or user belongs to, and those it may
   * view), each showing only those orgs: another org's caller never learns of this Keel's first
   * org, nor of any org it is not in.
   */
  const accountsOf = async (principal: Principal): Promise<Map<string, string[]>> => {
    const orgs = new Map<string, string | undefined>();
    const own = principal.org ? await store.get({ org: principal.org, kind: 'org', gvc: '', name: principal.org }) : undefined;
    if (own) orgs.set(own.name, accountIdIn(own.data.status));
    for (const org of await resources.listOrgs(principal)) orgs.set(org.name, accountIdIn(org.status));
    const accounts = new Map<string, string[]>();
    for (const [org, id] of [...orgs].sort(([a], [b]) => a.localeCompare(b))) {
      if (id !== undefined) accounts.set(id, [...(accounts.get(id) ?? []), org]);
    }
    return accounts;
  };
  const present = (id: string, orgs: string[]) => ({
    kind: 'account',
    id,
    name: id,
    description: 'Keel (the billing account of the orgs created here)',
    tags: {},
    version: 1,
    created: started,
    lastModified: started,
    links: [{ rel: 'self', href: `/account/${id}` }, ...orgs.map((org) => ({ rel: 'org', href: `/org/${org}` }))],
    status: { active: true, orgs },
  });
  /** The caller's account of that id; the same 404 for one that does not exist and one that is not the caller's. */
  const ownAccount = async (request: FastifyRequest) => {
    const requested = (request.params as { id: string }).id;
    const orgs = (await accountsOf(request.principal)).get(requested);
    if (!orgs) throw ApiError.notFound(`account '${requested}' not found; the accounts of your orgs are listed at GET /account`);
    return present(requested, orgs);
  };

  app.get('/account', async (request) => {
    const items = [...(await accountsOf(request.principal))].map(([id, orgs]) => present(id, orgs));
    return { kind: 'list', itemKind: 'account', items, links: [{ rel: 'self', href: '/account' }] };
  });
  app.post('/account', { schema: refusedRoute('Keel has one billing account and creates no other') }, async (request) => {
    throw notServed(request, 'this Keel has one billing account (see GET /account) and creates no other');
  });
  app.get('/account/-schema/permissions', async () => permissionSchema(findKind('account')!, '/account/-schema/permissions'));
  app.get('/account/:id', ownAccount);
  app.patch('/account/:id', { schema: refusedRoute("the billing account is Keel's own and fixed") }, async (request) => {
    const account = await ownAccount(request);
    throw notServed(request, `the billing account '${account.id}' is Keel's own and cannot be changed`);
  });
  app.post('/account/:id/org', async (request, reply) => {
    await ownAccount(request);
    const body = request.body as { org?: unknown; invitees?: unknown } | undefined;
    if (!body || typeof body !== 'object' || !body.org || typeof body.org !== 'object' || Array.isArray(body.org)) {
      throw ApiError.badRequest('the body must be {org: {name, description?, tags?}, invitees?: [emails]}', [{ path: 'org', message: 'is required' }]);
    }
    const invitees = inviteesOf(body.invitees);
    const created = await resources.createOrg(request.principal, body.org);
    await invite(resources, request.principal, created.name, invitees);
    const self = created.links.find((l) => l.rel === 'self')!.href;
    return reply.code(201).header('location', self).send(await resources.get(request.principal, findKind('org')!, { org: created.name }, created.name));
  });
  app.route({
    method: ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'],
    url: '/account/:id/*',
    schema: refusedRoute('Keel keeps no billing data'),
    handler: async (request) => {
      await ownAccount(request);
      throw notServed(request, 'Keel keeps no billing data (invoices, payment, usage, policies, configuration, connections)');
    },
  });
}

/** The id in an org's status.accountLink (`/account/ID`). */
function accountIdIn(status: unknown): string | undefined {
  const link = (status as { accountLink?: unknown } | undefined)?.accountLink;
  return typeof link === 'string' && link.startsWith('/account/') ? link.slice('/account/'.length) : undefined;
}

/**
 * The invitees' emails, checked before anything is created. The CLI adds the caller's own profile
 * email, which for a service-account key is a placeholder like `[name]`: those are skipped.
 */
function inviteesOf(raw: unknown): string[] {
  if (raw === undefined || raw === null) return [];
  if (!Array.isArray(raw) || raw.length > 100) throw ApiError.badRequest('invitees must be an array of at most 100 emails', [{ path: 'invitees', message: 'must be an array of emails' }]);
  const out: string[] = [];
  raw.forEach((value, i) => {
    if (value === null || value === undefined || (typeof value === 'string' && /^\[.*\]$/.test(value))) return;
    if (typeof value !== 'string' || value.length > 254 || !EMAIL.test(value)) throw ApiError.badRequest(`invitees[${i}] is not an email address`, [{ path: `invitees[${i}]`, message: 'is not an email address' }]);
    out.push(value.toLowerCase());
  });
  return [...new Set(out)];
}

/** Adds each invitee to the new org as a user in its superusers group (the caller is a superuser there now). */
async function invite(resources: Resources, principal: Principal, org: string, emails: string[]): Promise<void> {
  if (emails.length === 0) return;
  const user = findKind('user')!;
  const group = findKind('group')!;
  const links: string[] = [];
  for (const email of emails) {
    const existing: Resource | undefined = await resources.get(principal, user, { org }, email).catch(() => undefined);
    if (!existing) await resources.create(principal, user, { org }, { name: email, email });
    links.push(`/org/${org}/user/${email}`);
  }
  await resources.patch(principal, group, { org }, 'superusers', { '$append/memberLinks': links });
}
