// The summary above an item's views: a few fields of its spec per kind, as data. A field is a path
// into the item (`a.b[]` goes through each element of the list a.b) or into a list under the item
// (`from`: a workload's locations are its deployments), shown as text, a template of sub-paths, the
// names at the end of links, or the keys of an object. A kind without an entry has no summary.
import { useEffect } from 'preact/hooks';
import { call, selfOf, type Item, type ListBody, type WatchEvent } from './api';
import { useLoad } from './widgets';

/** How a value is shown: a link by its name or by its kind and name, an object by its keys. */
const FORMATS = {
  name: (v: unknown) => [String(v).split('/').pop() ?? ''],
  ref: (v: unknown) => [String(v).split('/').slice(-2).join('/')],
  keys: (v: unknown) => (v !== null && typeof v === 'object' ? Object.keys(v) : [text(v)]),
};
type Format = keyof typeof FORMATS;

interface Field {
  label: string;
  path: string;
  /** Each value as a template of its sub-paths ('{number}/{protocol}', '{links[]|ref}'; '{}' is the value itself). */
  show?: string;
  as?: Format;
  /** A list under the item (GET <item>/<from>) that `path` reads instead of the item. */
  from?: string;
}

const ports: Field['show'] = '{number}/{protocol}';

const SUMMARY: Record<string, Field[]> = {
  workload: [
    { label: 'Type', path: 'spec.type' },
    { label: 'Images', path: 'spec.containers[].image' },
    { label: 'Ports', path: 'spec.containers[].ports[]', show: ports },
    { label: 'Schedule', path: 'spec.job.schedule' },
    { label: 'Locations', path: 'items[].name', from: 'deployment' },
    { label: 'Identity', path: 'spec.identityLink', as: 'name' },
  ],
  gvc: [
    { label: 'Locations', path: 'spec.staticPlacement.locationLinks[]', as: 'name' },
    { label: 'Pull secrets', path: 'spec.pullSecretLinks[]', as: 'name' },
    { label: 'Domain', path: 'spec.domain' },
  ],
  identity: [
    { label: 'AWS account', path: 'aws.cloudAccountLink', as: 'name' },
    { label: 'GCP account', path: 'gcp.cloudAccountLink', as: 'name' },
    { label: 'Azure account', path: 'azure.cloudAccountLink', as: 'name' },
    { label: 'Network resources', path: 'networkResources[].name' },
  ],
  volumeset: [
    { label: 'Capacity', path: 'spec.initialCapacity', show: '{} GB' },
    { label: 'Performance class', path: 'spec.performanceClass' },
    { label: 'File system', path: 'spec.fileSystemType' },
  ],
  secret: [{ label: 'Type', path: 'type' }],
  policy: [
    { label: 'Target kind', path: 'targetKind' },
    { label: 'Target', path: 'target' },
    { label: 'Targets', path: 'targetLinks[]', as: 'name' },
    { label: 'Bindings', path: 'bindings[]', show: '{permissions[]} → {principalLinks[]|ref}' },
  ],
  serviceaccount: [{ label: 'Keys', path: 'keys[].name' }],
  group: [{ label: 'Members', path: 'memberLinks[]', as: 'ref' }],
  user: [{ label: 'Email', path: 'email' }],
  domain: [
    { label: 'DNS mode', path: 'spec.dnsMode' },
    { label: 'GVC', path: 'spec.gvcLink', as: 'name' },
    { label: 'Workload', path: 'spec.workloadLink', as: 'name' },
    { label: 'Ports', path: 'spec.ports[]', show: ports },
  ],
  location: [
    { label: 'Provider', path: 'provider' },
    { label: 'Region', path: 'region' },
    { label: 'Enabled', path: 'spec.enabled' },
  ],
  cloudaccount: [{ label: 'Provider', path: 'provider' }],
  image: [
    { label: 'Repository', path: 'repository' },
    { label: 'Tag', path: 'tag' },
    { label: 'Digest', path: 'digest' },
  ],
  ipset: [
    { label: 'Attached to', path: 'spec.link' },
    { label: 'Locations', path: 'spec.locations[].name', as: 'name' },
  ],
  quota: [
    { label: 'Limit', path: 'max' },
    { label: 'Used', path: 'current' },
    { label: 'Unit', path: 'unit' },
  ],
  dbcluster: [
    { label: 'Version', path: 'spec.postgres.version' },
    { label: 'Storage', path: 'spec.postgres.storageGB', show: '{} GB' },
    { label: 'Locations', path: 'spec.postgres.locations[].name', as: 'name' },
  ],
  memcachecluster: [
    { label: 'Nodes', path: 'spec.nodeCount' },
    { label: 'Node size', path: 'spec.nodeSizeGiB', show: '{} GiB' },
    { label: 'Locations', path: 'spec.locations[]', as: 'name' },
  ],
  spicedbcluster: [
    { label: 'Version', path: 'spec.version' },
    { label: 'Locations', path: 'spec.locations[]', as: 'name' },
  ],
  mk8s: [
    { label: 'Version', path: 'spec.version' },
    { label: 'Provider', path: 'spec.provider', as: 'keys' },
  ],
};

/** The values at a path; `[]` after a step goes through each element of a list. */
function valuesAt(value: unknown, path: string): unknown[] {
  let current = [value];
  for (const step of path ? path.split('.') : []) {
    const each = step.endsWith('[]');
    const key = each ? step.slice(0, -2) : step;
    current = current.flatMap((v) => {
      const next = v !== null && typeof v === 'object' ? (v as Record<string, unknown>)[key] : undefined;
      if (each) return Array.isArray(next) ? next : [];
      return next === undefined || next === null || next === '' ? [] : [next];
    });
  }
  return current;
}

const text = (value: unknown): string => (value !== null && typeof value === 'object' ? JSON.stringify(value) : String(value));

function shown(field: Field, value: unknown): string[] {
  if (field.as) return FORMATS[field.as](value);
  if (field.show)
    return [
      field.show.replace(/\{([^}|]*)(?:\|(\w+))?\}/g, (_, sub: string, as?: Format) =>
        valuesAt(value, sub)
          .flatMap((v) => (as && as in FORMATS ? FORMATS[as](v) : [text(v)]))
          .join(', '),
      ),
    ];
  return [text(value)];
}

/** The summary's rows for an item (and the lists under it that a field reads): fields with no value are left out. */
export function summaryOf(kind: string, item: Item, lists: Record<string, unknown> = {}): Array<{ label: string; value: string }> {
  return (SUMMARY[kind] ?? [])
    .map((field) => ({ label: field.label, value: valuesAt(field.from ? lists[field.from] : item, field.path).flatMap((v) => shown(field, v)).join(field.show ? '; ' : ', ') }))
    .filter((row) => row.value !== '');
}

export function SpecSummary(props: { kind: string; item: Item; path: string }) {
  const sources = [...new Set((SUMMARY[props.kind] ?? []).flatMap((f) => (f.from ? [f.from] : [])))];
  const lists = useLoad(
    async (signal) => Object.fromEntries(await Promise.all(sources.map(async (from) => [from, await call<ListBody>('GET', `${props.path}/${from}`, undefined, { signal }).catch(() => undefined)]))),
    [props.path, props.item.version],
  );
  // A list under the item changes without a new version of the item (a deployment appears): read it again.
  useEffect(() => {
    if (!sources.length) return;
    const on = (e: Event) => {
      const self = selfOf((e as CustomEvent<WatchEvent>).detail.object);
      if (sources.some((from) => self.startsWith(`${props.path}/${from}/`))) lists.reload();
    };
    document.addEventListener('keel-child-change', on);
    return () => document.removeEventListener('keel-child-change', on);
  }, [props.path]);
  const rows = summaryOf(props.kind, props.item, lists.data);
  if (!rows.length) return null;
  return (
    <dl class="summary" aria-label="Summary" data-testid="summary">
      {rows.map((row) => (
        <div key={row.label} data-testid={`summary-${row.label}`}>
          <dt>{row.label}</dt>
          <dd>{row.value}</dd>
        </div>
      ))}
    </dl>
  );
}
