// The MCP server: tools named as the hosted Control Plane MCP server names them where one maps onto
// Keel, plus Keel's own (reset, snapshots, faults, an explained 403). Every tool is a call of Keel's
// REST API made through `Api`, as the session's caller: over HTTP a read run in process by its GET
// route's own handler or a write injected into the same app (see server/mcp.ts), over stdio a request
// to the endpoint with the caller's token. No tool reaches the store itself, so the routes authorize
// and audit each call as they would the REST call.
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { getParseErrorMessage } from '@modelcontextprotocol/sdk/server/zod-compat.js';
import { ErrorCode, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { findKind, KINDS, resourceSchema } from '../kinds/index.js';
import { VERSION } from '../version.js';

export interface ApiAnswer {
  status: number;
  /** The body, parsed, or as JSON text (a JsonText) where it came as text a tool may pass on unread. */
  body: unknown;
}

/** A body as the JSON text the API answered: a tool that passes it on does not parse it, one that reads it does, once. */
export class JsonText {
  private parsed?: { value: unknown };
  constructor(readonly text: string) {}
  get value(): unknown {
    this.parsed ??= { value: JSON.parse(this.text) };
    return this.parsed.value;
  }
}

/** A body's value, parsed if it is JSON text. */
function valueOf(body: unknown): unknown {
  return body instanceof JsonText ? body.value : body;
}

/** Keel's REST API as the session's caller. */
export interface Api {
  request(method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE', path: string, body?: unknown): Promise<ApiAnswer>;
  /** The org a tool works in when its `org` argument is left out. */
  defaultOrg(): Promise<string | undefined>;
}

/** Bounds every argument: a string an agent sends is never longer than this. */
const MAX_TEXT = 4096;
const MAX_ITEMS = 100;

const name = z.string().min(1).max(256).describe('The name of the resource.');
const org = z.string().min(1).max(64).optional().describe("The org; left out, the session's org.");
const gvc = z.string().min(1).max(64).describe('The GVC (global virtual cloud) the resource lives in.');
const kind = z.string().min(1).max(64).describe('The kind of resource: gvc, workload, secret, policy, group, serviceaccount, identity, domain, volumeset, …');
const text = z.string().max(MAX_TEXT);
const tagValue = z.union([z.string().max(MAX_TEXT), z.number(), z.boolean(), z.null()]);
const tags = z
  .record(z.string().min(1).max(256), tagValue)
  .refine((t) => Object.keys(t).length <= MAX_ITEMS, `at most ${MAX_ITEMS} tags`)
  .describe('Tags to set (patch semantics: a key set to null is removed, keys left out are kept).');
const createTags = z
  .record(z.string().min(1).max(256), z.union([z.string().max(MAX_TEXT), z.number(), z.boolean()]))
  .refine((t) => Object.keys(t).length <= MAX_ITEMS, `at most ${MAX_ITEMS} tags`)
  .describe('Tags of the new resource.');
/** A kind-specific document part (a spec), bounded by size once serialized. */
const document = z
  .record(z.string(), z.unknown())
  .refine((v) => JSON.stringify(v).length <= 256 * 1024, 'is larger than 256 KiB')
  .describe('Fields as the REST API takes them (see the kind schema resource keel://kinds/KIND).');

type Args = Record<string, unknown>;

/** The hosted server's tiers, each holding the one before. */
const TIERS = ['core', 'mk8s', 'full'];

/** The hosted mk8s tier's providers (Keel's ephemeral provider has no hosted tool). */
const MK8S_TOOL_PROVIDERS = ['aws', 'azure', 'digitalocean', 'gcp', 'generic', 'hetzner', 'lambdalabs', 'linode', 'oblivus', 'paperspace', 'triton'];

/** The sets of tools a session may ask for (`?toolsets=core,keel`); all of them when it names none. */
export const TOOLSETS = ['core', 'mk8s', 'full', 'keel', 'all'];

export function toolsetsIn(list: string): string[] {
  const sets = list.split(',').map((s) => s.trim()).filter(Boolean);
  const unknown = sets.find((s) => !TOOLSETS.includes(s));
  if (unknown !== undefined) throw new Error(`unknown toolset '${unknown}': use ${TOOLSETS.join(', ')}`);
  return sets;
}

/** The MCP server, and its tools' calls as the server answers them (arguments checked against the tool's schema first). */
export interface Mcp {
  server: McpServer;
  callTool(name: string, args: unknown): Promise<CallToolResult>;
}

export function createMcp(api: Api, options: { toolsets?: string[] } = {}): Mcp {
  const server = new McpServer({ name: 'keel', version: VERSION }, { instructions: INSTRUCTIONS });
  const calls = new Map<string, { input: z.ZodObject<z.ZodRawShape>; run: (args: Args) => Promise<CallToolResult> }>();
  const orgOf = async (args: Args) => {
    const chosen = (args.org as string | undefined) ?? (await api.defaultOrg());
    if (!chosen) throw new ToolRefusal('org is required: this session has no default org', { code: 'bad_request' });
    return chosen;
  };
  const kindPath = async (args: Args) => {
    const def = findKind(args.kind as string);
    if (!def) throw new ToolRefusal(`unknown kind '${args.kind}'`, { code: 'bad_request', kinds: KINDS.map((k) => k.kind) });
    const o = enc(await orgOf(args));
    if (def.kind === 'org') return '/org';
    if (def.scope === 'gvc') {
      if (!args.gvc) throw new ToolRefusal(`gvc is required for kind '${def.kind}'`, { code: 'bad_request' });
      return `/org/${o}/gvc/${enc(args.gvc as string)}/${def.kind}`;
    }
    return `/org/${o}/${def.kind}`;
  };
  const call = async (method: Parameters<Api['request']>[0], path: string, body?: unknown) => {
    const answer = await api.request(method, path, body);
    if (answer.status >= 400) throw new ToolRefusal(messageOf(answer), valueOf(answer.body));
    return answer.body;
  };
  const tool = (toolName: string, description: string, shape: z.ZodRawShape, run: (args: Args) => Promise<unknown>, annotations: { readOnlyHint?: boolean; destructiveHint?: boolean } = {}) => {
    const answer = async (args: Args): Promise<CallToolResult> => {
      try {
        return resultOf(await run(args));
      } catch (err) {
        if (err instanceof ToolRefusal) return refusalOf(err);
        throw err;
      }
    };
    server.registerTool(toolName, { description, inputSchema: shape, annotations }, answer);
    calls.set(toolName, { input: z.object(shape), run: answer });
  };
  // The hosted tiers nest (core within mk8s within full); keel is Keel's own tools.
  const want = (set: string) => {
    const asked = options.toolsets;
    if (!asked || asked.includes('all')) return true;
    if (set === 'keel') return asked.includes('keel');
    return TIERS.slice(TIERS.indexOf(set)).some((tier) => asked.includes(tier));
  };

  if (want('core')) {
    tool(
      'list_resources',
      'Lists the resources of one kind in an org (or a GVC, for gvc-scoped kinds). With `tags`, only the resources carrying every given tag with that value. Cheap: one page of up to 100 items; use get_resource for one item in full.',
      { kind, org, gvc: gvc.optional(), tags: z.record(z.string().min(1).max(256), z.union([z.string().max(MAX_TEXT), z.number(), z.boolean()])).refine((t) => Object.keys(t).length <= MAX_ITEMS).optional().describe('Only resources with all of these tag values.') },
      async (args) => {
        const base = await kindPath(args);
        const wanted = args.tags as Record<string, unknown> | undefined;
        if (!wanted || Object.keys(wanted).length === 0) return call('GET', base);
        const terms = Object.entries(wanted).map(([tag, value]) => ({ op: '=', tag, value }));
        return call('POST', `${base}/-query`, { kind: args.kind, spec: { match: 'all', terms } });
      },
      { readOnlyHint: true },
    );
    tool(
      'get_resource',
      'Reads one resource in full (spec, status, tags, links). Use it to check what a change did.',
      { kind, name, org, gvc: gvc.optional() },
      async (args) => call('GET', `${await kindPath(args)}/${enc(args.name as string)}`),
      { readOnlyHint: true },
    );
    tool(
      'delete_resource',
      'Deletes one resource. It cannot be undone; a GVC must be empty first.',
      { kind, name, org, gvc: gvc.optional() },
      async (args) => {
        await call('DELETE', `${await kindPath(args)}/${enc(args.name as string)}`);
        return { deleted: true, kind: args.kind, name: args.name };
      },
      { destructiveHint: true },
    );
    tool(
      'get_resource_schema',
      "The JSON Schema of a kind's documents: which fields a create takes and what they hold.",
      { kind },
      async (args) => {
        const def = findKind(args.kind as string);
        if (!def) throw new ToolRefusal(`unknown kind '${args.kind}'`, { code: 'bad_request', kinds: KINDS.map((k) => k.kind) });
        return { kind: def.kind, scope: def.scope, summary: def.summary, schema: resourceSchema(def) };
      },
      { readOnlyHint: true },
    );
    tool(
      'get_permissions',
      'The permissions a kind has (what a policy binding can grant on it), and which imply which.',
      { kind, org },
      async (args) => {
        const def = findKind(args.kind as string);
        if (!def) throw new ToolRefusal(`unknown kind '${args.kind}'`, { code: 'bad_request' });
        return call('GET', def.kind === 'org' ? '/org/-schema/permissions' : `/org/${enc(await orgOf(args))}/${def.kind}/-schema/permissions`);
      },
      { readOnlyHint: true },
    );
    tool(
      'create_gvc',
      'Creates a GVC (global virtual cloud): the place workloads run in, with the locations they run at.',
      { name, org, description: text.optional(), tags: createTags.optional(), locations: z.array(z.string().min(1).max(256)).max(MAX_ITEMS).optional().describe('Location names (aws-us-west-2, …); see list_resources kind location.') },
      async (args) => {
        const o = await orgOf(args);
        const locations = (args.locations as string[] | undefined) ?? [];
        return call('POST', `/org/${enc(o)}/gvc`, {
          name: args.name,
          description: args.description,
          tags: args.tags,
          spec: locations.length ? { staticPlacement: { locationLinks: locations.map((l) => `/org/${o}/location/${l}`) } } : {},
        });
      },
    );
    tool(
      'update_gvc',
      "Changes a GVC's description, tags (patch semantics) or spec fields (merged into the spec).",
      { name, org, description: text.optional(), tags: tags.optional(), spec: document.optional() },
      async (args) => call('PATCH', `/org/${enc(await orgOf(args))}/gvc/${enc(args.name as string)}`, patchOf(args)),
    );
    tool(
      'create_workload',
      'Creates a workload in a GVC: one container from `image`, serving `port`. Its replicas start right after (see get_workload_logs, list_deployments).',
      {
        name,
        gvc,
        org,
        image: z.string().min(1).max(1024).describe('The container image (nginx:1.27, or //image/NAME:TAG from this org).'),
        port: z.number().int().min(1).max(65535).optional().describe('The port the container listens on.'),
        type: z.enum(['serverless', 'standard', 'stateful', 'cron']).optional().describe('Default serverless.'),
        description: text.optional(),
        tags: createTags.optional(),
        env: z.record(z.string().min(1).max(256), z.string().max(MAX_TEXT)).refine((e) => Object.keys(e).length <= MAX_ITEMS).optional().describe('Environment variables.'),
        command: z.string().max(MAX_TEXT).optional(),
        args: z.array(z.string().max(MAX_TEXT)).max(MAX_ITEMS).optional(),
        cpu: z.string().max(16).optional().describe('CPU of the container, e.g. 50m (default).'),
        memory: z.string().max(16).optional().describe('Memory of the container, e.g. 128Mi (default).'),
        schedule: z.string().max(256).optional().describe('Cron schedule (type cron only).'),
      },
      async (args) => {
        const container: Record<string, unknown> = { name: 'main', image: args.image, cpu: args.cpu ?? '50m', memory: args.memory ?? '128Mi' };
        if (args.port !== undefined) container.ports = [{ number: args.port, protocol: 'http' }];
        if (args.env) container.env = Object.entries(args.env as Record<string, string>).map(([n, value]) => ({ name: n, value }));
        if (args.command !== undefined) container.command = args.command;
        if (args.args) container.args = args.args;
        const type = (args.type as string | undefined) ?? 'serverless';
        const spec: Record<string, unknown> = { type, containers: [container], defaultOptions: { autoscaling: { metric: type === 'serverless' ? 'concurrency' : 'disabled', minScale: 1, maxScale: 1 } } };
        if (type === 'cron') {
          spec.job = { schedule: args.schedule ?? '*/5 * * * *' };
          delete spec.defaultOptions;
        }
        return call('POST', `/org/${enc(await orgOf(args))}/gvc/${enc(args.gvc as string)}/workload`, { name: args.name, description: args.description, tags: args.tags, spec });
      },
    );
    tool(
      'update_workload',
      "Changes a workload's description, tags (patch semantics) or spec (merged as the REST PATCH merges: containers by name).",
      { name, gvc, org, description: text.optional(), tags: tags.optional(), spec: document.optional() },
      async (args) => call('PATCH', `/org/${enc(await orgOf(args))}/gvc/${enc(args.gvc as string)}/workload/${enc(args.name as string)}`, patchOf(args)),
    );
    tool(
      'list_deployments',
      "A workload's deployments: one per location, with its readiness and the versions its replicas run.",
      { workload: name.describe('The workload.'), gvc, org },
      async (args) => call('GET', `/org/${enc(await orgOf(args))}/gvc/${enc(args.gvc as string)}/workload/${enc(args.workload as string)}/deployment`),
      { readOnlyHint: true },
    );
    tool(
      'get_workload_logs',
      "The latest log lines of a workload's replicas (all its containers), newest last. Cheap for a few hundred lines.",
      { workload: name.describe('The workload.'), gvc, org, limit: z.number().int().min(1).max(5000).optional().describe('Lines (default 100).'), since: z.string().max(32).optional().describe('How far back, e.g. 15m or 2h (default 1h).') },
      async (args) => {
        const o = await orgOf(args);
        const query = `{gvc="${args.gvc}", workload="${args.workload}"}`;
        const since = parseDuration((args.since as string | undefined) ?? '1h');
        const end = Date.now();
        const qs = new URLSearchParams({ query, limit: String(args.limit ?? 100), direction: 'backward', start: String((end - since) * 1e6), end: String(end * 1e6) });
        const body = valueOf(await call('GET', `/logs/org/${enc(o)}/loki/api/v1/query_range?${qs}`)) as { data?: { result?: Array<{ stream: Record<string, string>; values: Array<[string, string]> }> } };
        const lines = (body.data?.result ?? [])
          .flatMap((s) => s.values.map(([ns, line]) => ({ time: new Date(Number(BigInt(ns) / 1_000_000n)).toISOString(), replica: s.stream.replica, container: s.stream.container, line, ns: BigInt(ns) })))
          .sort((a, b) => (a.ns < b.ns ? -1 : a.ns > b.ns ? 1 : 0))
          .map(({ ns: _ns, ...rest }) => rest);
        return { workload: args.workload, gvc: args.gvc, lines };
      },
      { readOnlyHint: true },
    );
    tool(
      'create_policy',
      'Creates a policy granting permissions on resources of one kind (all of them, or those named or matched by tags) to users, groups, service accounts or identities.',
      {
        name,
        org,
        targetKind: kind.describe('The kind the policy grants permissions on.'),
        targetLinks: z.array(z.string().max(1024)).max(MAX_ITEMS).optional().describe('Links of the targeted resources; left out (and no target "all"), the policy targets nothing until items are added.'),
        target: z.literal('all').optional().describe('"all": every resource of targetKind.'),
        bindings: z.array(z.object({ permissions: z.array(z.string().min(1).max(64)).min(1).max(MAX_ITEMS), principalLinks: z.array(z.string().min(1).max(1024)).min(1).max(MAX_ITEMS) })).max(MAX_ITEMS).optional(),
        description: text.optional(),
        tags: createTags.optional(),
      },
      async (args) =>
        call('POST', `/org/${enc(await orgOf(args))}/policy`, {
          name: args.name,
          description: args.description,
          tags: args.tags,
          targetKind: args.targetKind,
          ...(args.targetLinks ? { targetLinks: args.targetLinks } : {}),
          ...(args.target ? { target: args.target } : {}),
          bindings: args.bindings ?? [],
        }),
    );
    tool(
      'update_policy',
      "Changes a policy's description, tags (patch semantics), bindings or targetLinks (each replaced whole when given).",
      { name, org, description: text.optional(), tags: tags.optional(), bindings: z.array(z.object({ permissions: z.array(z.string().min(1).max(64)).min(1).max(MAX_ITEMS), principalLinks: z.array(z.string().min(1).max(1024)).min(1).max(MAX_ITEMS) })).max(MAX_ITEMS).optional(), targetLinks: z.array(z.string().max(1024)).max(MAX_ITEMS).optional() },
      async (args) => {
        const patch = patchOf(args);
        if (args.bindings) patch.bindings = args.bindings;
        if (args.targetLinks) patch.targetLinks = args.targetLinks;
        return call('PATCH', `/org/${enc(await orgOf(args))}/policy/${enc(args.name as string)}`, patch);
      },
    );
  }

  // Kinds whose create and update are the hosted server's tools too: the document as the REST API
  // takes it, with a kind's own fields as arguments (the spec, or top-level fields), and tags with patch
  // semantics on updates. One table, one pair of handlers.
  const writable: Array<{ set: 'core' | 'full' | 'mk8s'; kind: string; create: string; update: string; what: string; fields: z.ZodRawShape; createOnly?: z.ZodRawShape; inSpec?: boolean; specOf?: (args: Args) => Record<string, unknown> | undefined }> = [
    { set: 'core', kind: 'identity', create: 'create_identity', update: 'update_identity', what: "an identity (a workload's cloud and network access, gvc-scoped)", fields: { fields: document.optional().describe("The identity's fields as the REST API takes them at the top level: aws, gcp, azure, ngs, networkResources, nativeNetworkResources (see get_resource_schema).") } },
    { set: 'core', kind: 'volumeset', create: 'create_volumeset', update: 'update_volumeset', what: 'a volume set (persistent volumes a workload mounts, gvc-scoped)', fields: { spec: document.optional().describe('The spec: initialCapacity (GB), performanceClass, fileSystemType, snapshots, autoscaling (see get_resource_schema).') }, inSpec: true },
    { set: 'core', kind: 'domain', create: 'create_domain', update: 'update_domain', what: 'a domain (the name a workload is reached at, and its routes and ports)', fields: { spec: document.optional().describe('The spec: dnsMode, ports (routes, tls, cors), gvcLink, acceptAllHosts (see get_resource_schema).') }, inSpec: true },
    {
      set: 'full', kind: 'group', create: 'create_group', update: 'edit_group', what: 'a group of users and service accounts (members by link, by query, or by identity claims)',
      fields: {
        memberLinks: z.array(z.string().min(1).max(1024)).max(1000).optional().describe('Members: /org/ORG/user/EMAIL or /org/ORG/serviceaccount/NAME links (replaces the list when given).'),
        memberQuery: document.optional().describe('Users matching this query are members: {kind: "user", spec: {match, terms}}.'),
        identityMatcher: z.object({ expression: z.string().min(1).max(MAX_TEXT), language: z.enum(['jmespath', 'javascript']).optional() }).optional().describe("Users whose sign-in claims satisfy this expression are members."),
      },
    },
    { set: 'full', kind: 'serviceaccount', create: 'create_service_account', update: 'update_service_account', what: 'a service account (a non-human principal; give it keys with add_key_to_service_account)', fields: {} },
    {
      set: 'full', kind: 'ipset', create: 'create_ipset', update: 'update_ipset', what: "an IP set (reserved egress addresses in locations, for a workload's link)",
      fields: {
        link: z.string().max(1024).optional().describe('The workload that uses the addresses: //gvc/GVC/workload/NAME.'),
        locations: z.array(z.object({ name: z.string().min(1).max(1024).describe('A location link: //location/NAME.'), retentionPolicy: z.enum(['keep', 'free']) })).max(MAX_ITEMS).optional().describe('Locations to reserve addresses in (replaces the list when given).'),
      },
      specOf: (args) => (args.link === undefined && args.locations === undefined ? undefined : { ...(args.link !== undefined ? { link: args.link } : {}), ...(args.locations !== undefined ? { locations: args.locations } : {}) }),
    },
    {
      set: 'full', kind: 'cloudaccount', create: 'create_cloud_account', update: 'update_cloud_account', what: 'a cloud account (a link to an account at a cloud provider that identities use)',
      createOnly: { provider: z.enum(['aws', 'gcp', 'azure', 'ngs']).describe('The provider; it cannot change later.') },
      fields: { data: z.object({ roleArn: z.string().max(2048).optional(), projectId: z.string().max(128).optional(), secretLink: z.string().max(1024).optional() }).strict().optional().describe('aws: roleArn; gcp: projectId; azure and ngs: secretLink.') },
    },
    { set: 'full', kind: 'agent', create: 'create_agent', update: 'update_agent', what: 'an agent (a connector into a private network; its bootstrap config comes with the create)', fields: {} },
    { set: 'full', kind: 'auditctx', create: 'create_audit_context', update: 'edit_audit_context', what: 'an audit context (a place for custom audit events; read them with query_audit_events)', fields: {} },
    ...MK8S_TOOL_PROVIDERS.map((provider) => ({
      set: 'mk8s' as const, kind: 'mk8s', create: `create_mk8s_${provider}`, update: `update_mk8s_${provider}`, what: `a managed Kubernetes cluster on ${provider}`,
      fields: {
        version: z.string().min(1).max(32).optional().describe('The Kubernetes version, e.g. 1.28.4 (required on create).'),
        provider: document.optional().describe(`The ${provider} provider block (spec.provider.${provider}): region, node pools, networking, … as the REST API takes it.`),
        addOns: document.optional().describe('Add-ons (spec.addOns): dashboard, logs, metrics, …'),
        firewall: z.array(z.object({ sourceCIDR: z.string().min(1).max(64), description: z.string().max(250).optional() })).max(MAX_ITEMS).optional().describe('Who may reach the API server (replaces the list when given).'),
      },
      specOf: (args: Args) => {
        const spec: Record<string, unknown> = {};
        if (args.version !== undefined) spec.version = args.version;
        if (args.provider !== undefined) spec.provider = { [provider]: args.provider };
        if (args.addOns !== undefined) spec.addOns = args.addOns;
        if (args.firewall !== undefined) spec.firewall = args.firewall;
        return Object.keys(spec).length ? spec : undefined;
      },
    })),
  ];
  for (const w of writable) {
    if (!want(w.set)) continue;
    const def = findKind(w.kind)!;
    const where: z.ZodRawShape = def.scope === 'gvc' ? { gvc } : {};
    const pathOf = async (args: Args) => kindPath({ ...args, kind: w.kind });
    const names = Object.keys(w.fields);
    const bodyOf = (args: Args, base: Record<string, unknown>, creating: boolean) => {
      const body: Record<string, unknown> = { ...base };
      if (w.specOf) {
        const spec = w.specOf(args);
        if (spec || creating) body.spec = spec ?? {};
      } else if (w.inSpec) {
        if (args.spec !== undefined || creating) body.spec = args.spec ?? {};
      } else if (w.kind === 'identity') Object.assign(body, args.fields as Record<string, unknown> | undefined, base);
      else for (const field of names) if (args[field] !== undefined) body[field] = args[field];
      if (creating) for (const field of Object.keys(w.createOnly ?? {})) body[field] = args[field];
      return body;
    };
    tool(w.create, `Creates ${w.what}.`, { name, org, ...where, description: text.optional(), tags: createTags.optional(), ...w.createOnly, ...w.fields }, async (args) =>
      call('POST', await pathOf(args), bodyOf(args, { name: args.name, description: args.description, tags: args.tags }, true)),
    );
    tool(w.update, `Changes ${w.what}: description, tags (patch semantics)${names.length ? ` or ${names.join(', ')}` : ''}.`, { name, org, ...where, description: text.optional(), tags: tags.optional(), ...w.fields }, async (args) => {
      const { spec: _spec, ...patch } = patchOf(args);
      return call('PATCH', `${await pathOf(args)}/${enc(args.name as string)}`, bodyOf(args, patch, false));
    });
  }

  if (want('core')) {
    tool(
      'query_audit_events',
      "Audit events of an org (the Audit API), oldest first unless direction is backward: who did what to which resource, and with what result. Keel's own events are in context cpln; custom events in an audit context. Needs readAudit on the context.",
      {
        org,
        context: z.string().min(1).max(64).optional().describe('The audit context (default cpln, the events of every change).'),
        resourceType: z.string().min(1).max(64).optional().describe('Only events on resources of this kind (workload, secret, …).'),
        resourceName: z.string().min(1).max(256).optional().describe('Only events on resources of this name.'),
        resourceId: z.string().min(1).max(256).optional().describe('Only events on the resource with this id.'),
        subject: z.string().min(1).max(256).optional().describe('Only events by this subject (a user email or service account name).'),
        actionType: z.string().min(1).max(64).optional().describe('Only events of this action (create, edit, delete, reveal, …).'),
        from: z.string().max(64).optional().describe('Only events at or after this ISO 8601 time.'),
        to: z.string().max(64).optional().describe('Only events at or before this ISO 8601 time.'),
        direction: z.enum(['forward', 'backward']).optional().describe('backward: newest first.'),
        limit: z.number().int().min(1).max(1000).optional().describe('Events per page (default 100); the answer links the next page.'),
      },
      async (args) => {
        const qs = new URLSearchParams();
        const put = (key: string, value: unknown) => value !== undefined && qs.set(key, String(value));
        put('contextName', args.context);
        put('resourceType', args.resourceType);
        put('resourceName', args.resourceName);
        put('resourceId', args.resourceId);
        put('subjectName', args.subject);
        put('actionType', args.actionType);
        put('fromEvent', args.from);
        put('toEvent', args.to);
        put('direction', args.direction);
        put('limit', args.limit);
        return call('GET', `/audit/org/${enc(await orgOf(args))}${qs.size ? `?${qs}` : ''}`);
      },
      { readOnlyHint: true },
    );
    tool(
      'list_quotas',
      "The org's quotas: each limit, what it counts and how much is used.",
      { org },
      async (args) => call('GET', `/org/${enc(await orgOf(args))}/quota`),
      { readOnlyHint: true },
    );
    const parent = { gvc, workload: name.describe('The workload.') };
    const commandsOf = async (args: Args, kindName: 'workload' | 'volumeset', item: string) => `/org/${enc(await orgOf(args))}/gvc/${enc(args.gvc as string)}/${kindName}/${enc(item)}/-command`;
    tool(
      'list_commands',
      "The commands run on a workload (or a volume set): cron runs, replica stops, volume operations, newest first, with their progress.",
      { gvc, org, workload: name.optional().describe('The workload.'), volumeset: name.optional().describe('The volume set (instead of a workload).') },
      async (args) => {
        if ((args.workload === undefined) === (args.volumeset === undefined)) throw new ToolRefusal('name exactly one of workload and volumeset', { code: 'bad_request' });
        return call('GET', await commandsOf(args, args.workload !== undefined ? 'workload' : 'volumeset', (args.workload ?? args.volumeset) as string));
      },
      { readOnlyHint: true },
    );
    tool(
      'get_command',
      'One command of a workload (or a volume set), with its lifecycle stage and messages.',
      { gvc, org, id: z.string().min(1).max(64).describe('The command id.'), workload: name.optional().describe('The workload.'), volumeset: name.optional().describe('The volume set (instead of a workload).') },
      async (args) => {
        if ((args.workload === undefined) === (args.volumeset === undefined)) throw new ToolRefusal('name exactly one of workload and volumeset', { code: 'bad_request' });
        return call('GET', `${await commandsOf(args, args.workload !== undefined ? 'workload' : 'volumeset', (args.workload ?? args.volumeset) as string)}/${enc(args.id as string)}`);
      },
      { readOnlyHint: true },
    );
    const location = z.string().min(1).max(256).describe('The location (aws-us-west-2, …).');
    tool(
      'workload_start_cron',
      'Runs a cron workload now in one location, as its schedule would (a runCronWorkload command; needs exec.runCronWorkload).',
      { ...parent, org, location, containerOverrides: z.array(z.object({ name: z.string().min(1).max(64), command: z.string().max(MAX_TEXT).optional(), args: z.array(z.string().max(MAX_TEXT)).max(MAX_ITEMS).optional(), env: z.array(z.object({ name: z.string().min(1).max(256), value: z.string().max(MAX_TEXT) })).max(MAX_ITEMS).optional() })).max(MAX_ITEMS).optional().describe('Changes to containers for this run only.') },
      async (args) => call('POST', await commandsOf(args, 'workload', args.workload as string), { type: 'runCronWorkload', spec: { location: args.location, ...(args.containerOverrides ? { containerOverrides: args.containerOverrides } : {}) } }),
    );
    tool(
      'workload_stop_replica',
      'Stops one replica of a workload; the workload starts the replicas it still wants again (a stopReplica command; needs exec.stopReplica).',
      { ...parent, org, location, replica: z.string().min(1).max(256).describe('The replica name (see list_deployments).') },
      async (args) => call('POST', await commandsOf(args, 'workload', args.workload as string), { type: 'stopReplica', spec: { location: args.location, replica: args.replica } }),
      { destructiveHint: true },
    );
    tool(
      'expand_volumeset',
      "Grows one volume of a volume set (an expandVolume command; needs exec or edit on the volume set).",
      { gvc, org, volumeset: name.describe('The volume set.'), location, volumeIndex: z.number().int().min(0).max(10_000).optional().describe('Which volume (default 0).'), newStorageCapacity: z.number().int().min(1).max(65536).describe('The new size in GB.') },
      async (args) => call('POST', await commandsOf(args, 'volumeset', args.volumeset as string), { type: 'expandVolume', spec: { location: args.location, volumeIndex: args.volumeIndex ?? 0, newStorageCapacity: args.newStorageCapacity } }),
    );
  }

  if (want('full')) {
    tool(
      'add_key_to_service_account',
      "Adds a key to a service account and answers it: the key is shown this once. Anyone holding it acts as the service account.",
      { name, org, description: text.optional().describe('What the key is for.') },
      async (args) => call('POST', `/org/${enc(await orgOf(args))}/serviceaccount/${enc(args.name as string)}/-addKey`, { description: args.description ?? '' }),
    );
    tool(
      'get_quota',
      'One quota of the org: its limit, what it counts and how much is used.',
      { name, org },
      async (args) => call('GET', `/org/${enc(await orgOf(args))}/quota/${enc(args.name as string)}`),
      { readOnlyHint: true },
    );
    tool(
      'update_org',
      "Changes the org's description, tags (patch semantics) or spec fields (merged into the spec: sessionTimeoutSeconds, authConfig, observability, …).",
      { org, description: text.optional(), tags: tags.optional(), spec: document.optional() },
      async (args) => call('PATCH', `/org/${enc(await orgOf(args))}`, patchOf(args)),
    );
    for (const [toolName, adding] of [['add_gvc_locations', true], ['remove_gvc_locations', false]] as const) {
      tool(
        toolName,
        `${adding ? 'Adds locations to' : 'Removes locations from'} a GVC's static placement (the others stay).`,
        { name, org, locations: z.array(z.string().min(1).max(256)).min(1).max(MAX_ITEMS).describe('Location names (aws-us-west-2, …).') },
        async (args) => {
          const o = await orgOf(args);
          const path = `/org/${enc(o)}/gvc/${enc(args.name as string)}`;
          const current = valueOf(await call('GET', path)) as { version?: number; spec?: { staticPlacement?: { locationLinks?: string[] } } };
          const linkOf = (l: string) => `/org/${o}/location/${l}`;
          const had = current.spec?.staticPlacement?.locationLinks ?? [];
          const named = new Set((args.locations as string[]).map(linkOf));
          const links = adding ? [...had, ...[...named].filter((l) => !had.includes(l))] : had.filter((l) => !named.has(l) && !named.has(linkOf(l.split('/').pop()!)));
          // The version read is the PATCH's precondition: a change made in between is a 409, never lost.
          return call('PATCH', path, { version: current.version, spec: { staticPlacement: { locationLinks: links } } });
        },
      );
    }
  }

  if (want('keel')) {
    tool(
      'keel_apply',
      'Creates or replaces one resource from a full document (as `cpln apply` does): for kinds without a create_* tool. Needs create, or edit when it exists.',
      { kind, org, gvc: gvc.optional(), document: document.describe('The resource document: name, description, tags, spec, … as the REST API takes it.') },
      async (args) => {
        const base = await kindPath(args);
        const doc = args.document as Record<string, unknown>;
        const itemName = typeof doc.name === 'string' ? doc.name : undefined;
        if (!itemName) throw new ToolRefusal('document.name is required', { code: 'bad_request' });
        const existing = await api.request('GET', `${base}/${enc(itemName)}`);
        if (existing.status === 404) return call('POST', base, doc);
        if (existing.status >= 400) throw new ToolRefusal(messageOf(existing), valueOf(existing.body));
        return call('PUT', `${base}/${enc(itemName)}`, doc);
      },
    );
    tool(
      'keel_reveal_secret',
      "Reads a secret's value. Other tools never show secret values (get_resource leaves `data` out); this one needs the `reveal` permission on the secret. Like any read it changes nothing and records no audit event. Use it only when the value itself is needed.",
      { name, org },
      async (args) => call('GET', `/org/${enc(await orgOf(args))}/secret/${enc(args.name as string)}/-reveal`),
      { readOnlyHint: true },
    );
    tool(
      'keel_reset',
      "Empties this Keel and re-creates the first org as on a first start (KEEL_ALLOW_RESET=on, the first org's superuser). Everything else is gone: save a snapshot first if unsure.",
      {},
      async () => call('POST', '/-admin/reset'),
      { destructiveHint: true },
    );
    tool(
      'keel_snapshot_save',
      "Saves every org's state under a name, to restore later (KEEL_ALLOW_SNAPSHOTS=on, the first org's superuser). Cheap: one copy of the store's rows.",
      { name: z.string().min(1).max(64).describe('The snapshot name.') },
      async (args) => call('POST', '/-admin/snapshots', { name: args.name }),
    );
    tool(
      'keel_snapshot_restore',
      'Puts the state saved in a snapshot back, replacing the current one (KEEL_ALLOW_SNAPSHOTS=on).',
      { name: z.string().min(1).max(64).describe('The snapshot name.') },
      async (args) => call('POST', `/-admin/snapshots/${enc(args.name as string)}/-restore`),
      { destructiveHint: true },
    );
    tool(
      'keel_snapshot_list',
      'The saved snapshots.',
      {},
      async () => call('GET', '/-admin/snapshots'),
      { readOnlyHint: true },
    );
    tool(
      'keel_faults',
      'Sets the fault rules (errors, delays on matching requests; KEEL_FAULTS=on) to test how an agent copes. An empty list clears them; left out, reads them.',
      { rules: z.array(z.record(z.string(), z.unknown())).max(MAX_ITEMS).optional().describe('Rules as PUT /-admin/faults takes them (docs/faults.md).') },
      async (args) => (args.rules === undefined ? call('GET', '/-admin/faults') : call('PUT', '/-admin/faults', { rules: args.rules })),
    );
    tool(
      'create_sandbox',
      "Creates a throw-away org with its own superuser key, removed with everything in it after ttlSeconds (KEEL_ALLOW_SANDBOXES=on, the first org's superuser). Use the key it returns (a new MCP session with it, or the REST API) to practise without touching real orgs; you are not a member of it yourself.",
      {
        ttlSeconds: z.number().int().min(1).max(31_536_000).describe('Seconds until it is removed (at most KEEL_SANDBOX_MAX_TTL).'),
        seed: z.array(z.record(z.string(), z.unknown())).max(500).refine((v) => JSON.stringify(v).length <= 1024 * 1024, 'is larger than 1 MiB').optional().describe('Documents to create in it, as `cpln apply` (or KEEL_INIT) takes them.'),
      },
      async (args) => call('POST', '/-admin/sandboxes', { ttlSeconds: args.ttlSeconds, ...(args.seed ? { seed: args.seed } : {}) }),
    );
    tool(
      'delete_sandbox',
      'Removes a sandbox now, with everything in it.',
      { org: z.string().min(1).max(64).describe('The sandbox org.') },
      async (args) => {
        await call('DELETE', `/-admin/sandboxes/${enc(args.org as string)}`);
        return { deleted: true, org: args.org };
      },
      { destructiveHint: true },
    );
    tool(
      'keel_explain_forbidden',
      "Explains a 403: tries the call again and says which permission on which target was missing, and which policies on that kind the caller can see. Use it after a tool error with code 'forbidden'.",
      { kind, name: name.optional(), org, gvc: gvc.optional(), action: z.enum(['view', 'create', 'edit']).optional().describe('What was attempted (default view). A delete cannot be tried without doing it: ask about edit.') },
      async (args) => {
        const base = await kindPath(args);
        const path = args.name ? `${base}/${enc(args.name as string)}` : base;
        const method = ({ view: 'GET', create: 'POST', edit: 'PATCH' } as const)[(args.action as 'view' | undefined) ?? 'view'];
        // A dry run of the write: answered as the write would be, and nothing changes.
        const answer =
          method === 'GET'
            ? await api.request('GET', path)
            : method === 'POST'
              ? await api.request('POST', `${base}?dryRun=true`, { name: args.name ?? 'explain' })
              : await api.request(method, `${path}?dryRun=true`, {});
        if (answer.status !== 403) return { forbidden: false, status: answer.status, message: answer.status >= 400 ? messageOf(answer) : 'allowed' };
        const message = messageOf(answer);
        const granted = /not granted \[([^\]]*)\] on (\S+)/.exec(message);
        const o = await orgOf(args);
        const policies = await api.request('POST', `/org/${enc(o)}/policy/-query`, { kind: 'policy', spec: { match: 'all', terms: [{ property: 'targetKind', op: '=', value: findKind(args.kind as string)!.kind }] } });
        return {
          forbidden: true,
          message,
          permission: granted ? granted[1].split(' or ') : undefined,
          target: granted ? granted[2] : path,
          policies: policies.status === 200 ? ((valueOf(policies.body) as { items?: Array<{ name: string; bindings?: unknown }> }).items ?? []).map((p) => ({ name: p.name, bindings: p.bindings })) : `not readable: ${messageOf(policies)}`,
        };
      },
      { readOnlyHint: true },
    );
  }

  for (const def of KINDS) {
    server.registerResource(`kind-${def.kind}`, `keel://kinds/${def.kind}`, { mimeType: 'application/json', description: `${def.summary} (${def.scope}-scoped): its JSON Schema.` }, async (uri) => ({
      contents: [{ uri: uri.href, mimeType: 'application/json', text: JSON.stringify({ kind: def.kind, scope: def.scope, summary: def.summary, schema: resourceSchema(def) }) }],
    }));
  }
  server.registerPrompt(
    'deploy_workload',
    { description: 'Walks an agent through deploying a container image as a workload and checking it runs.', argsSchema: { image: z.string().max(1024), gvc: z.string().max(64).optional() } },
    ({ image, gvc: place }) => ({
      messages: [
        {
          role: 'user',
          content: {
            type: 'text',
            text: `Deploy ${image} on Keel. 1. list_resources kind=gvc; if ${place ? `gvc '${place}'` : 'no gvc'} exists, create_gvc. 2. create_workload with the image and its port. 3. get_resource kind=workload until status.ready, and list_deployments. 4. get_workload_logs to see it started. On a tool error, read its message; on 'forbidden' call keel_explain_forbidden.`,
          },
        },
      ],
    }),
  );
  return {
    server,
    // As the SDK's McpServer answers tools/call once the request is parsed: an unknown tool, arguments
    // outside the schema and a thrown error are tool errors with the SDK's messages.
    async callTool(toolName, args) {
      const known = calls.get(toolName);
      if (!known) return toolError(`MCP error ${ErrorCode.InvalidParams}: Tool ${toolName} not found`);
      const parsed = known.input.safeParse(args ?? {});
      if (!parsed.success) return toolError(`MCP error ${ErrorCode.InvalidParams}: Input validation error: Invalid arguments for tool ${toolName}: ${getParseErrorMessage(parsed.error)}`);
      try {
        return await known.run(parsed.data);
      } catch (err) {
        return toolError(err instanceof Error ? err.message : String(err));
      }
    },
  };
}

function toolError(text: string): CallToolResult {
  return { content: [{ type: 'text', text }], isError: true };
}

const INSTRUCTIONS =
  "Keel: a local implementation of the Control Plane API. Every tool runs as this session's key or user; a refusal is a tool error carrying Keel's message. Tools follow the hosted Control Plane MCP server's names.";

/** A refusal answered to the agent as a tool error (Keel's message verbatim, its error object as structuredContent). */
export class ToolRefusal extends Error {
  constructor(
    message: string,
    readonly detail: unknown,
  ) {
    super(message);
  }
}

function resultOf(body: unknown): CallToolResult {
  // An object's JSON text is passed on as the API gave it, and parsed only if the result is read
  // rather than serialized by resultJson (by the SDK's server, over stdio).
  if (body instanceof JsonText && body.text.startsWith('{')) return new ItemResult(body);
  const value = valueOf(body);
  const structured = value && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : { value: value ?? null };
  return { content: [{ type: 'text', text: JSON.stringify(value ?? null) }], structuredContent: structured };
}

/** A result whose item is still the API's JSON text: its structuredContent is that text, parsed when read. */
// One class rather than an object with its own getter per result: cheaper to make, and nothing to
// remember it by. The item is a private field, so a copy of the result (the SDK's server checks and
// copies it, over stdio) holds its content and structuredContent only.
class ItemResult implements CallToolResult {
  [key: string]: unknown;
  readonly content: Array<{ type: 'text'; text: string }>;
  readonly #item: JsonText;
  constructor(item: JsonText) {
    this.#item = item;
    this.content = [{ type: 'text', text: item.text }];
  }
  get structuredContent(): Record<string, unknown> {
    return this.#item.value as Record<string, unknown>;
  }
  get itemText(): string {
    return this.#item.text;
  }
}

/** A tool's result as JSON text: the item's text put in as it is where it has not been parsed, both as the text content and as structuredContent. */
export function resultJson(result: CallToolResult): string {
  if (!(result instanceof ItemResult)) return JSON.stringify(result);
  const text = result.itemText;
  return `{"content":[{"type":"text","text":${JSON.stringify(text)}}],"structuredContent":${text}}`;
}

function refusalOf(err: ToolRefusal): CallToolResult {
  const detail = err.detail && typeof err.detail === 'object' && !Array.isArray(err.detail) ? (err.detail as Record<string, unknown>) : {};
  return { isError: true, content: [{ type: 'text', text: err.message }], structuredContent: { message: err.message, ...detail } };
}

function messageOf(answer: ApiAnswer): string {
  const body = valueOf(answer.body) as { message?: unknown } | undefined;
  return typeof body?.message === 'string' ? body.message : `HTTP ${answer.status}`;
}

function patchOf(args: Args): Record<string, unknown> {
  const patch: Record<string, unknown> = {};
  if (args.description !== undefined) patch.description = args.description;
  if (args.tags !== undefined) patch.tags = args.tags;
  if (args.spec !== undefined) patch.spec = args.spec;
  return patch;
}

function enc(part: string): string {
  return encodeURIComponent(part);
}

function parseDuration(text: string): number {
  const m = /^(\d{1,6})(s|m|h|d)$/.exec(text);
  if (!m) throw new ToolRefusal(`since must be like 15m, 2h or 1d, not '${text}'`, { code: 'bad_request' });
  return Number(m[1]) * { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[m[2] as 's']!;
}
