import type { FastifyInstance, FastifyRequest } from 'fastify';
import { accessReport } from '../auth/access-report.js';
import type { Authorizer, Target } from '../auth/authorizer.js';
import type { Principal } from '../auth/principal.js';
import { ApiError } from '../errors.js';
import { KINDS, findKind } from '../kinds/index.js';
import type { KindDef, Place } from '../kinds/types.js';
import { keyOf, targetOf, type Resources } from '../resources/service.js';
import type { Store } from '../store/types.js';

type Params = Record<string, string>;

/** Access-control routes beyond the generic ones: user invitation and lookup by email, access reports. */
/** Makes a one-time invitation link for an email invited to an org. */
export type InvitationLinks = (request: FastifyRequest, email: string, org: string) => Promise<string>;

export function mountAccessRoutes(app: FastifyInstance, resources: Resources, store: Store, auth: Authorizer, links: InvitationLinks): void {
  const user = findKind('user')!;
  const org = findKind('org')!;

  // Users are named by their email: a create or apply body may give only the email.
  // Callback style, and decided by the method first: this runs before every handler.
  app.addHook('preHandler', (request, _reply, done) => {
    if (request.method === 'POST' || request.method === 'PUT') {
      const url = request.routeOptions.url;
      if (url === '/org/:org/user' || url === '/org/:org/user/-invite') {
        const body = request.body as Record<string, unknown> | undefined;
        if (body && typeof body === 'object' && body.name === undefined && typeof body.email === 'string') body.name = body.email;
      }
    }
    done();
  });

  app.post('/org/:org/user/-invite', async (request, reply) => {
    const body = request.body as Record<string, unknown> | undefined;
    // `cpln user invite` sends {emails: [...], groupLink?}: each becomes a user (and a member of the group).
    // Each answer carries the invitees' one-time links (inviteLink, inviteLinks by email), for the caller to hand on.
    if (body && Array.isArray(body.emails)) {
      const list = await inviteMany(resources, request, body.emails, body.groupLink);
      const inviteLinks: Record<string, string> = {};
      for (const item of list.items) inviteLinks[String(item.name)] = await links(request, String(item.name), placeOf(request).org);
      return { ...list, inviteLinks };
    }
    if (!body || typeof body.email !== 'string') throw ApiError.badRequest('email is required', [{ path: 'email', message: 'is required' }]);
    const created = await resources.create(request.principal, user, placeOf(request), body);
    const inviteLink = await links(request, String(created.name), placeOf(request).org);
    return reply.code(201).header('location', created.links[0].href).send({ ...created, inviteLink });
  });

  app.get('/org/:org/user/-for/email/:email', (request) => resources.get(request.principal, user, placeOf(request), (request.params as Params).email));

  app.get('/org/:org/-accessreport', (request) => accessReport(store, auth, request.principal, org, placeOf(request), placeOf(request).org));
  for (const def of KINDS) {
    if (def.kind === 'org') continue;
    const item = def.kind === 'gvc' ? '/org/:org/gvc/:gvc' : def.scope === 'gvc' ? `/org/:org/gvc/:gvc/${def.kind}/:name` : `/org/:org/${def.kind}/:name`;
    app.get(`${item}/-accessreport`, (request) => accessReport(store, auth, request.principal, def, placeOf(request, def), nameOf(request, def)));
    const collection = def.kind === 'gvc' ? '/org/:org/gvc' : def.scope === 'gvc' ? `/org/:org/gvc/:gvc/${def.kind}` : `/org/:org/${def.kind}`;
    app.get(`${collection}/-granted`, (request) => granted(auth, request.principal, def, placeOf(request, def), request.url.split('?')[0]));
    app.get(`${item}/-granted`, async (request) => {
      const place = placeOf(request, def);
      const name = nameOf(request, def);
      // Told only to a caller that may read the item, as its GET is (the same 403 or 404 otherwise).
      await resources.get(request.principal, def, place, name);
      const stored = await store.get(keyOf(def, place, name));
      if (!stored) throw ApiError.notFound(`${def.kind} '${name}' not found`);
      return granted(auth, request.principal, def, targetOf(stored), request.url.split('?')[0]);
    });
  }
}

/**
 * The permissions of a kind the caller holds on one item, or on all its items (a collection: policies
 * with `target: all`), implied ones included: what a client may offer, such as "Create" or "Edit",
 * asked without sending a write that fails. It tells the caller only about itself.
 */
async function granted(auth: Authorizer, principal: Principal, def: KindDef, target: Target, self: string) {
  await auth.requireMember(principal, target.org);
  const held: string[] = [];
  for (const permission of def.permissions) {
    try {
      await auth.check(principal, permission.name, def, target);
      held.push(permission.name);
    } catch (err) {
      if (!(err instanceof ApiError && err.code === 'forbidden')) throw err;
    }
  }
  return { kind: 'grantedpermissions', targetKind: def.kind, granted: held, links: [{ rel: 'self', href: self }] };
}

async function inviteMany(resources: Resources, request: FastifyRequest, emails: unknown[], groupLink: unknown) {
  const place = placeOf(request);
  if (emails.length === 0 || emails.length > 100 || !emails.every((e) => typeof e === 'string')) {
    throw ApiError.badRequest('emails must be an array of 1 to 100 email addresses', [{ path: 'emails', message: 'must be 1 to 100 emails' }]);
  }
  const group = typeof groupLink === 'string' ? groupLink.split('/').pop()! : undefined;
  if (groupLink !== undefined && (!group || !groupLink || typeof groupLink !== 'string')) throw ApiError.badRequest('groupLink must be a group link', [{ path: 'groupLink', message: 'must be a group link' }]);
  const user = findKind('user')!;
  const items = [];
  for (const email of emails as string[]) {
    const existing = await resources.get(request.principal, user, place, email).catch(() => undefined);
    items.push(existing ?? (await resources.create(request.principal, user, place, { name: email, email })));
  }
  if (group) await resources.patch(request.principal, findKind('group')!, place, group, { '$append/memberLinks': items.map((u) => u.links[0].href) });
  return { kind: 'list', itemKind: 'user', items, links: [{ rel: 'self', href: `/org/${place.org}/user` }] };
}

function placeOf(request: FastifyRequest, def?: KindDef): Place {
  const params = request.params as Params;
  return { org: params.org, gvc: def?.scope === 'gvc' ? params.gvc : undefined };
}

function nameOf(request: FastifyRequest, def: KindDef): string {
  const params = request.params as Params;
  return def.kind === 'gvc' ? params.gvc : params.name;
}
