// Routes the official clients call beyond the generic ones (the CLI's REST map, its commands and
// the Terraform provider): served where Keel can answer them, and otherwise a clear error object
// that says why, so no client waits, retries or builds a path from a missing value.
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { stringify as toYaml } from 'yaml';
import type { Config } from '../config.js';
import { ApiError } from '../errors.js';
import { findKind } from '../kinds/index.js';
import type { Place } from '../kinds/types.js';
import { parseQuery } from '../query/index.js';
import type { Resources } from '../resources/service.js';
import type { Store } from '../store/types.js';
import { mountBilling } from './billing.js';
import { mountExporters } from './exporters.js';
import { refusedRoute } from './docs.js';
import { notServed } from './errors.js';
import { mountReplicas } from './replicas.js';
import type { TerminalAccess } from './stream-sign-in.js';

type Params = Record<string, string>;

export function mountClientRoutes(app: FastifyInstance, resources: Resources, store: Store, config: Config, access: TerminalAccess): void {
  mountBilling(app, resources, store);
  mountExporters(app, resources);
  mountReplicas(app, resources, store, config, access);

  const org = findKind('org')!;
  const agent = findKind('agent')!;
  const task = findKind('task')!;

  // Secrets (and the opaque `resource` kind) of one type: a query on their `type` field.
  for (const kind of ['secret', 'resource']) {
    const def = findKind(kind)!;
    app.get(`/org/:org/${kind}/-for/type/:type`, async (request) => {
      const params = request.params as Params;
      const query = parseQuery({ spec: { match: 'all', terms: [{ op: '=', property: 'type', value: params.type }] } }, def);
      const page = await resources.query(request.principal, def, { org: params.org }, query, { limit: request.server.maxPageSize });
      return { kind: 'list', itemKind: kind, items: page.items, links: [{ rel: 'self', href: request.url.split('?')[0] }] };
    });
  }

  // Tasks addressed to the caller: a user's pending tasks (by its email) in each org it belongs to.
  const tasksForMe = async (request: FastifyRequest, orgs: string[]) => {
    const principal = request.principal;
    const items = [];
    if (principal.kind === 'user') {
      for (const o of orgs) {
        const query = parseQuery({ spec: { match: 'all', terms: [{ op: '=', property: 'targetEmail', value: principal.name }] } }, task);
        items.push(...(await resources.query(principal, task, { org: o }, query, { limit: request.server.maxPageSize })).items);
      }
    }
    return { kind: 'list', itemKind: 'task', items, links: [{ rel: 'self', href: request.url.split('?')[0] }] };
  };
  app.get('/task/-forme', async (request) => tasksForMe(request, (await resources.listOrgs(request.principal)).map((o) => o.name)));
  app.get('/org/:org/task/-forme', async (request) => {
    const params = request.params as Params;
    await resources.get(request.principal, org, { org: params.org }, params.org);
    return tasksForMe(request, [params.org]);
  });

  // What an agent reports about itself once it runs; Keel runs no agent process.
  app.get('/org/:org/agent/:name/-info', async (request) => {
    const params = request.params as Params;
    const item = await resources.get(request.principal, agent, { org: params.org }, params.name);
    return {
      kind: 'agentinfo',
      name: item.name,
      agentLink: item.links[0].href,
      status: item.status ?? {},
      active: false,
      peers: [],
      message: 'no agent process is connected: Keel records agents but runs none (an agent started with this bootstrap configuration would report here)',
    };
  });
  // The Kubernetes manifests for an agent's bootstrap configuration (`cpln agent manifest`).
  app.post('/org/:org/agent/-helpwith/k8s', async (request, reply) => {
    const params = request.params as Params;
    await resources.get(request.principal, org, { org: params.org }, params.org);
    const body = (request.body ?? {}) as { namespace?: unknown; bootstrap?: unknown; replicas?: unknown; createNamespace?: unknown };
    if (!body.bootstrap || typeof body.bootstrap !== 'object') throw ApiError.badRequest('bootstrap (the agent bootstrap configuration) is required', [{ path: 'bootstrap', message: 'is required' }]);
    const namespace = typeof body.namespace === 'string' && body.namespace ? body.namespace : 'cpln-agent';
    const replicas = Number(body.replicas ?? 1);
    if (!Number.isInteger(replicas) || replicas < 1 || replicas > 100) throw ApiError.badRequest('replicas must be a whole number from 1 to 100', [{ path: 'replicas', message: 'must be 1..100' }]);
    const agentId = String((body.bootstrap as Record<string, unknown>).agentId ?? 'agent').slice(0, 18).toLowerCase().replace(/[^a-z0-9-]/g, '-');
    const docs = [
      ...(body.createNamespace === true ? [{ apiVersion: 'v1', kind: 'Namespace', metadata: { name: namespace } }] : []),
      { apiVersion: 'v1', kind: 'Secret', metadata: { name: `bootstrap-${agentId}`, namespace }, stringData: { 'bootstrap.json': JSON.stringify(body.bootstrap) } },
      {
        apiVersion: 'apps/v1',
        kind: 'Deployment',
        metadata: { name: `agent-${agentId}`, namespace },
        spec: {
          replicas,
          selector: { matchLabels: { app: `agent-${agentId}` } },
          template: {
            metadata: { labels: { app: `agent-${agentId}` } },
            spec: {
              containers: [{ name: 'agent', image: 'gcr.io/cpln-build/agent:latest', env: [{ name: 'BOOTSTRAP_PATH', value: '/etc/controlplane/bootstrap.json' }], volumeMounts: [{ name: 'bootstrap', mountPath: '/etc/controlplane', readOnly: true }] }],
              volumes: [{ name: 'bootstrap', secret: { secretName: `bootstrap-${agentId}` } }],
            },
          },
        },
      },
    ];
    return reply.type('application/json').send(JSON.stringify(docs.map((d) => toYaml(d)).join('---\n')));
  });
  app.post('/org/:org/agent/-helpwith/docker', async (request) => {
    const params = request.params as Params;
    await resources.get(request.principal, org, { org: params.org }, params.org);
    throw ApiError.badRequest('agent up is not available: it runs the Control Plane agent image in Docker, and Keel runs no agents (use `cpln agent manifest` for the Kubernetes manifests)');
  });

  // How to prepare a cloud account for Control Plane: Keel connects to no cloud, so there is nothing to prepare.
  app.get('/org/:org/cloudaccount/-instructions/:provider', async (request) => {
    const params = request.params as Params;
    await resources.get(request.principal, org, { org: params.org }, params.org);
    if (!['aws', 'gcp', 'azure', 'ngs'].includes(params.provider)) throw ApiError.notFound(`no instructions for provider '${params.provider}' (one of aws, gcp, azure, ngs)`);
    return {
      message: `Keel records ${params.provider} cloud accounts without connecting to ${params.provider}: no role, trust policy or service account needs to be set up. Create the cloud account with its name and identifiers, and Keel stores it as given.`,
      data: {},
    };
  });

  // Runtime configuration the hosted platform derives for an org, GVC, identity or workload: Keel
  // derives none. The item must exist (404 otherwise); then every method the clients use is refused.
  const configOf: Array<[string, string, (params: Params) => Place & { name: string }]> = [
    ['/org/:org/-config', 'org', (p) => ({ org: p.org, name: p.org })],
    ['/org/:org/gvc/:gvc/-config', 'gvc', (p) => ({ org: p.org, name: p.gvc })],
    ['/org/:org/gvc/:gvc/identity/:name/-config', 'identity', (p) => ({ org: p.org, gvc: p.gvc, name: p.name })],
    ['/org/:org/gvc/:gvc/workload/:name/-config', 'workload', (p) => ({ org: p.org, gvc: p.gvc, name: p.name })],
  ];
  for (const [url, kind, placeOf] of configOf) {
    app.route({
      method: ['GET', 'PATCH', 'DELETE'],
      url,
      schema: refusedRoute('Keel derives no runtime configuration'),
      handler: async (request) => {
        const { name, ...place } = placeOf(request.params as Params);
        await resources.get(request.principal, findKind(kind)!, place, name);
        throw notServed(request, 'Keel derives no runtime configuration (it keeps no per-location settings); read or change the resource itself');
      },
    });
  }

  // A query under one item: queries run over a collection.
  for (const kind of ['serviceaccount', 'domain']) {
    app.post(`/org/:org/${kind}/:name/-query`, { schema: refusedRoute(`a query runs over the collection, /org/{org}/${kind}/-query`) }, async (request) => {
      const params = request.params as Params;
      await resources.get(request.principal, findKind(kind)!, { org: params.org }, params.name);
      throw notServed(request, `a query runs over a collection: POST /org/${params.org}/${kind}/-query`);
    });
  }

  // Tasks are kept inside orgs; /task/ID finds one by its id (or name) among the caller's orgs.
  const findTask = async (request: FastifyRequest) => {
    const ref = (request.params as Params).id;
    const query = parseQuery({ spec: { match: 'any', terms: [{ op: '=', property: 'id', value: ref }, { op: '=', property: 'name', value: ref }] } }, task);
    for (const { name } of await resources.listOrgs(request.principal)) {
      const [found] = (await resources.query(request.principal, task, { org: name }, query, { limit: 1 })).items;
      if (found) return { org: name, item: found };
    }
    throw ApiError.notFound(`task '${ref}' not found in any org you may view`);
  };
  app.get('/task/:id', async (request) => (await findTask(request)).item);
  app.delete('/task/:id', async (request, reply) => {
    const { org: name, item } = await findTask(request);
    await resources.delete(request.principal, task, { org: name }, item.name);
    return reply.code(202).type('application/json').send();
  });
  app.post('/task/:id', { schema: refusedRoute('Keel acts on no answer to a task') }, async (request) => {
    await findTask(request);
    throw notServed(request, 'Keel records tasks but acts on no answer (invitations add users at once); read the task, change its response with PATCH on its link, or delete it');
  });

  // The signed-in person and short links belong to the hosted console's accounts (users sign in
  // with a browser there); Keel's callers are service-account keys and trusted JWTs.
  const signIn = 'sign in with a service-account key (cpln profile update NAME --token KEY) or a trusted JWT';
  app.route({ method: ['GET', 'POST'], url: '/user', schema: refusedRoute('Keel has no user directory of the hosted service'), handler: async (request) => {
    throw notServed(request, `Keel has no user directory of the hosted service; ${signIn}, and read the users of an org at /org/ORG/user`);
  } });
  app.route({ method: ['GET', 'PATCH'], url: '/user/:id', schema: refusedRoute('Keel has no user directory of the hosted service'), handler: async (request) => {
    throw notServed(request, `Keel has no user directory of the hosted service; ${signIn}, and read the users of an org at /org/ORG/user`);
  } });
  app.get('/q/:query', { schema: refusedRoute('Keel has no short-link service') }, async (request) => {
    throw notServed(request, 'Keel has no short-link service');
  });
}
