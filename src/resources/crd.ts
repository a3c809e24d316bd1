// Kubernetes custom resources for the Control Plane operator (`cpln … -o crd`, `cpln helm template
// -o crd`): apiVersion cpln.io/v1, the lowercase kind, metadata with the name and namespace, the
// org (and GVC for GVC-scoped kinds), then the resource's own fields. The same for every kind.
// Links into the resource's org are written relative (`//location/x`), as the operator's
// manifests are, so a custom resource can be applied to another org unchanged.
import type { Resource } from '../kinds/types.js';
import { READ_ONLY_FIELDS } from './terraform.js';

export interface CrdOptions {
  /** The Kubernetes namespace (default `default`). */
  namespace?: string;
  /** Annotate the resources so that deleting them in Kubernetes keeps the Control Plane resource. */
  keep?: boolean;
}

export function toCustomResource(resource: Record<string, unknown>, org: string, options: CrdOptions = {}): Record<string, unknown> {
  const links = Array.isArray(resource.links) ? (resource.links as Resource['links']) : [];
  const gvc = typeof resource.gvc === 'string' ? resource.gvc : links.find((l) => l.rel === 'gvc')?.href.split('/').pop();
  const metadata: Record<string, unknown> = { name: resource.name, namespace: options.namespace ?? 'default' };
  if (options.keep) metadata.annotations = { 'cpln.io/resource-policy': 'keep' };
  const out: Record<string, unknown> = { apiVersion: 'cpln.io/v1', kind: resource.kind, metadata, org };
  if (gvc && resource.kind !== 'gvc') out.gvc = gvc;
  for (const [key, value] of Object.entries(resource)) {
    if (READ_ONLY_FIELDS.includes(key) || value === undefined) continue;
    out[key] = relativeLinks(value, `/org/${org}/`);
  }
  return out;
}

function relativeLinks(value: unknown, prefix: string): unknown {
  if (typeof value === 'string') return value.startsWith(prefix) ? `//${value.slice(prefix.length)}` : value;
  if (Array.isArray(value)) return value.map((v) => relativeLinks(v, prefix));
  if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, relativeLinks(v, prefix)]));
  return value;
}
