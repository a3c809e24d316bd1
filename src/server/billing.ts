// The billing service the clients find as /discovery `billing-ng` (Keel itself): one billing
// account owns every org of this Keel, and orgs are created through it as the CLI's
// `org create` and Terraform's cpln_org do:
//   GET  /account                 {kind: list, itemKind: account, items: [the account]}
//   GET  /account/{id}            the account
//   POST /account/{id}/org        {org: {name, description?, tags?}, invitees: [emails]} → 201 + the org
// Org creation goes through the same service call as POST /org (its checks and who may create
// orgs apply unchanged); invitees become users of the new org and members of its superusers.
// Keel keeps no invoices, payment methods or usage: the account's other routes answer a clear 400.
import type { FastifyInstance } from 'fastify';
import type { Principal } from '../auth/principal.js';
import { ApiError } from '../errors.js';
import { findKind } from '../kinds/index.js';
import { accountIdOf } from '../resources/orgs.js';
import type { Resource } from '../kinds/types.js';
import type { Resources } from '../resources/service.js';
import { refusedRoute } from './docs.js';
import { notServed } from './errors.js';
import { permissionSchema } from './routes.js';

const EMAIL = /^[^\s@/]+@[^\s@/]+$/;

export function mountBilling(app: FastifyInstance, resources: Resources, bootstrapOrg: string): void {
  const started = new Date();
  const id = accountIdOf(bootstrapOrg);
  const account = {
    kind: 'account',
    id,
    name: id,
    description: `Keel (the account of org '${bootstrapOrg}' and every org created here)`,
    tags: {},
    version: 1,
    created: started.toISOString(),
    lastModified: started.toISOString(),
    links: [
      { rel: 'self', href: `/account/${id}` },
      { rel: 'org', href: `/org/${bootstrapOrg}` },
    ],
    status: { active: true, orgs: [bootstrapOrg] },
  };
  const known = (requested: string) => {
    if (requested !== id) throw ApiError.notFound(`account '${requested}' not found; this Keel has one billing account, '${id}' (see GET /account)`);
  };

  app.get('/account', async () => ({ kind: 'list', itemKind: 'account', items: [account], links: [{ rel: 'self', href: '/account' }] }));
  app.post('/account', { schema: refusedRoute('Keel has one billing account and creates no other') }, async (request) => {
    throw notServed(request, `this Keel has one billing account, '${id}', and creates no other`);
  });
  app.get('/account/-schema/permissions', async () => permissionSchema(findKind('account')!, '/account/-schema/permissions'));
  app.get('/account/:id', async (request) => {
    known((request.params as { id: string }).id);
    return account;
  });
  app.patch('/account/:id', { schema: refusedRoute("the billing account is Keel's own and fixed") }, async (request) => {
    known((request.params as { id: string }).id);
    throw notServed(request, `the billing account '${id}' is Keel's own and cannot be changed`);
  });
  app.post('/account/:id/org', async (request, reply) => {
    known((request.params as { id: string }).id);
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
      known((request.params as { id: string }).id);
      throw notServed(request, 'Keel keeps no billing data (invoices, payment, usage, policies, configuration, connections)');
    },
  });
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
