// The exporters the clients find through /discovery (`terraform-exporter`, `k8s-crd-exporter`):
//   GET  /-export/terraform/<self link>   Terraform configuration of an item or of a whole list
//   GET  /-export/crd/<self link>         its Kubernetes custom resource(s) (a list: kind list)
//   POST /-export/crd/batch?org=&namespace=&keep=   {resources: [...]} → {kind: list, items}
// The self link is read through the resource service as the caller, so an export shows exactly
// what a GET of the link would (same permissions, same 403/404); every kind goes the same way.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Principal } from '../auth/principal.js';
import { ApiError } from '../errors.js';
import { findKind } from '../kinds/index.js';
import type { KindDef, Place, Resource } from '../kinds/types.js';
import { parseQuery } from '../query/index.js';
import { toCustomResource, type CrdOptions } from '../resources/crd.js';
import type { Resources } from '../resources/service.js';
import { toTerraform } from '../resources/terraform.js';

export const TERRAFORM_EXPORTER = '/-export/terraform';
export const CRD_EXPORTER = '/-export/crd';

/** The most items one export reads (a list is read page by page up to this). */
const MAX_ITEMS = 5000;
const PAGE = 500;

export function mountExporters(app: FastifyInstance, resources: Resources): void {
  app.get(`${TERRAFORM_EXPORTER}/*`, async (request, reply) => {
    const { items } = await read(resources, request.principal, linkOf(request, TERRAFORM_EXPORTER));
    // A JSON string: the response stays application/json and the client prints it as it is.
    return reply.type('application/json').send(JSON.stringify(toTerraform(items)));
  });
  app.get(`${CRD_EXPORTER}/*`, async (request) => {
    const link = linkOf(request, CRD_EXPORTER);
    const { items, list, org } = await read(resources, request.principal, link);
    const options = crdOptions(request);
    const rendered = items.map((item) => toCustomResource(item, org ?? item.name, options));
    return list ? { kind: 'list', itemKind: 'customresource', items: rendered, links: [{ rel: 'self', href: link }] } : rendered[0];
  });
  app.post(`${CRD_EXPORTER}/batch`, async (request) => {
    const query = request.query as Record<string, string | undefined>;
    const org = query.org;
    if (!org) throw ApiError.badRequest('the org query parameter is required', [{ path: 'org', message: 'is required' }]);
    await resources.get(request.principal, findKind('org')!, { org }, org);
    const body = request.body as { resources?: unknown } | undefined;
    if (!body || !Array.isArray(body.resources)) throw ApiError.badRequest('the body must be {resources: [...]}', [{ path: 'resources', message: 'must be an array' }]);
    if (body.resources.length > MAX_ITEMS) throw ApiError.badRequest(`at most ${MAX_ITEMS} resources per batch`, [{ path: 'resources', message: `has more than ${MAX_ITEMS} items` }]);
    const items = body.resources.map((r, i) => {
      const resource = r as Record<string, unknown>;
      if (!resource || typeof resource !== 'object' || typeof resource.kind !== 'string' || !findKind(resource.kind) || typeof resource.name !== 'string') {
        throw ApiError.badRequest(`resources[${i}] needs a known kind and a name`, [{ path: `resources[${i}]`, message: 'needs a known kind and a name' }]);
      }
      return toCustomResource(resource, org, crdOptions(request));
    });
    return { kind: 'list', itemKind: 'customresource', items, links: [] };
  });
}

function crdOptions(request: FastifyRequest): CrdOptions {
  const query = request.query as Record<string, string | undefined>;
  return { namespace: query.namespace || undefined, keep: query.keep === 'true' };
}

function linkOf(request: FastifyRequest, prefix: string): string {
  return `/${(request.params as { '*': string })['*']}`.replace(/\/+/g, '/').replace(/\/$/, '') || prefix;
}

/**
 * Reads what a self link names, as `principal`: one item, or every item of a list. `org` is the
 * org the link is in (undefined for `/org`, the list of orgs).
 */
async function read(resources: Resources, principal: Principal, link: string): Promise<{ items: Resource[]; list: boolean; org?: string }> {
  const parts = link.split('/').slice(1).map(decodeURIComponent);
  if (parts[0] !== 'org') throw unknownLink(link);
  if (parts.length === 1) return { items: await resources.listOrgs(principal), list: true };
  const org = parts[1];
  const orgDef = findKind('org')!;
  if (parts.length === 2) return { items: [await resources.get(principal, orgDef, { org }, org)], list: false, org };
  const rest = parts.slice(2);
  // `/org/o/gvc[/g]` is the GVC list or one GVC; below a GVC come its gvc-scoped kinds.
  const inGvc = rest[0] === 'gvc' && rest.length >= 3;
  const place: Place = inGvc ? { org, gvc: rest[1] } : { org };
  const [kind, name, ...extra] = inGvc ? rest.slice(2) : rest;
  const def = findKind(kind);
  if (!def || def.kind === 'org' || extra.length > 0 || (inGvc && def.scope !== 'gvc')) throw unknownLink(link);
  if (name !== undefined) {
    if (def.scope === 'gvc' && !inGvc) throw unknownLink(link);
    return { items: [await resources.get(principal, def, place, name)], list: false, org };
  }
  return { items: await readAll(resources, principal, def, place), list: true, org };
}

async function readAll(resources: Resources, principal: Principal, def: KindDef, place: Place): Promise<Resource[]> {
  const items: Resource[] = [];
  let after: string | undefined;
  do {
    const page = await resources.query(principal, def, place, parseQuery(undefined, def), { limit: PAGE, after });
    items.push(...page.items);
    after = page.next;
  } while (after && items.length < MAX_ITEMS);
  return items;
}

function unknownLink(link: string): ApiError {
  return ApiError.notFound(`nothing to export at ${link}: give the self link of a resource or of a list (/org/ORG/KIND[/NAME], /org/ORG/gvc/GVC/KIND[/NAME])`);
}
