// Status of the org-scoped kinds the hosted service reports on, as a function of the item and
// its age (so every process computes the same thing and no bookkeeping is stored):
// - mk8s: provisioning for one step, then serverUrl, oidcProviderUrl, homeLocation and the
//   status of each enabled add-on (the cluster is ready);
// - domain: pendingDnsConfig (with the DNS records to create), a step later pendingCertificate,
//   a step after that ready, with its endpoints and per-location certificate status; a pass that
//   comes late still writes each stage in turn (never more than one past the stored one).
import { deepEqual } from '../json.js';
import type { ItemKey, StoredItem } from '../store/types.js';
import { gvcLocations, writeStatus, type Outcome, type ReconcileContext } from './common.js';
import { stableId } from './views.js';

export async function reconcileMk8s(ctx: ReconcileContext, key: ItemKey): Promise<Outcome> {
  const item = await ctx.tx.get(key, 'update');
  if (!item) return {};
  const due = Date.parse(item.created) + ctx.stepMs;
  const previous = (item.data.status ?? {}) as Record<string, unknown>;
  if (ctx.now < due) return { after: due - ctx.now };
  const spec = (item.data.spec ?? {}) as Record<string, any>;
  const [provider, block] = Object.entries((spec.provider ?? {}) as Record<string, Record<string, any>>)[0] ?? ['generic', {}];
  const region = block?.region ?? block?.location ?? 'local';
  const alias = String(item.data.alias ?? stableId(item.id).slice(0, 12));
  const addOns: Record<string, unknown> = {};
  for (const name of Object.keys(spec.addOns ?? {})) {
    if (name === 'dashboard' || name === 'headlamp') addOns[name] = { url: `https://${name}.${alias}.mk8s.keel.local` };
    else if (name === 'awsWorkloadIdentity') addOns[name] = { oidcProviderConfig: { providerUrl: `https://oidc.${alias}.mk8s.keel.local`, audience: 'sts.amazonaws.com' } };
    else if (name === 'metrics') addOns[name] = { prometheusEndpoint: `https://metrics.${alias}.mk8s.keel.local`, remoteWriteConfig: {} };
    else if (name === 'logs') addOns[name] = { lokiAddress: `https://logs.${alias}.mk8s.keel.local` };
    else addOns[name] = {};
  }
  const status = {
    oidcProviderUrl: `https://oidc.${alias}.mk8s.keel.local`,
    serverUrl: `https://${alias}.mk8s.keel.local:6443`,
    homeLocation: provider === 'generic' ? String(region) : `${provider}-${String(region)}`,
    addOns,
  };
  if (!deepEqual(previous, status)) await writeStatus(ctx, item, { ...item.data, status });
  return {};
}

const DOMAIN_STAGES = ['pendingDnsConfig', 'pendingCertificate', 'ready'] as const;

export async function reconcileDomain(ctx: ReconcileContext, key: ItemKey): Promise<Outcome> {
  const item = await ctx.tx.get(key, 'update');
  // The ingress routes by what each pass finds (every change, and the periodic scan after a restart).
  ctx.runtime?.domain?.(key.org, key.name, item ? ((item.data.spec ?? {}) as Record<string, unknown>) : undefined, item?.created);
  if (!item) return {};
  const spec = (item.data.spec ?? {}) as Record<string, any>;
  const created = Date.parse(item.created);
  // The stage the domain's age calls for, but never more than one past the stored one.
  const stored = (DOMAIN_STAGES as readonly unknown[]).indexOf((item.data.status as { status?: unknown } | undefined)?.status);
  const stuck = stored < 1 && ctx.fault?.('domainStuck') !== undefined;
  const index = stuck ? 0 : Math.max(0, Math.min(Math.floor((ctx.now - created) / ctx.stepMs), stored + 1, DOMAIN_STAGES.length - 1));
  const stage = DOMAIN_STAGES[index];
  const gvcName = typeof spec.gvcLink === 'string' ? spec.gvcLink.split('/').pop()! : undefined;
  const gvc = gvcName ? await ctx.tx.get({ org: key.org, kind: 'gvc', gvc: '', name: gvcName }) : undefined;
  const target = gvc ? `${String(gvc.data.alias ?? gvcName)}.cpln.app` : `${key.org}.keel.local`;
  const dnsConfig =
    spec.dnsMode === 'ns'
      ? [1, 2].map((n) => ({ type: 'NS', ttl: 1800, host: item.name, value: `ns${n}.keel.local` }))
      : [{ type: 'CNAME', ttl: 300, host: item.name, value: target }];
  dnsConfig.push({ type: 'TXT', ttl: 600, host: `_cpln.${item.name}`, value: stableId(key.org, item.name) });
  const workloads = new Set<string>();
  if (typeof spec.workloadLink === 'string') workloads.add(spec.workloadLink);
  for (const port of (spec.ports ?? []) as Array<{ routes?: Array<{ workloadLink?: string }> }>) {
    for (const route of port.routes ?? []) if (route.workloadLink) workloads.add(route.workloadLink);
  }
  const endpoints =
    stage !== 'ready'
      ? []
      : workloads.size > 0
        ? [...workloads].map((workloadLink) => ({ url: `https://${item.name}`, workloadLink }))
        : [{ url: `https://${item.name}` }];
  const status = {
    status: stage,
    endpoints,
    locations: gvcLocations(gvc).map((name) => ({ name, certificateStatus: stage === 'ready' ? 'ready' : stage })),
    fingerprint: stableId(item.id, JSON.stringify(spec)),
    dnsConfig,
  };
  if (!deepEqual(item.data.status ?? {}, status)) await writeStatus(ctx, item, { ...item.data, status });
  if (stage === 'ready' || stuck) return {};
  return { after: created + (index + 1) * ctx.stepMs - ctx.now };
}
