// An item of any kind: overview (with the kind's own panel where it has one), YAML and JSON views,
// edit with a server dry-run diff, tags, delete, history with diff and restore, who has access.
import { useEffect, useState } from 'preact/hooks';
import { parse, stringify } from 'yaml';
import { call, callAt, explain, mayEdit, Problem, selfOf, watch, type Item, type KindInfo } from './api';
import { LogsView } from './logs';
import { KindPanel } from './panels';
import { SecretForm } from './secret-form';
import { SpecSummary } from './summary';
import { templateOf } from './templates';
import { go } from './route';
import { CodeEditor, Diff, ErrorBox, ago, statusSummary, useLoad, Grid } from './widgets';

const READ_ONLY = ['id', 'created', 'lastModified', 'links', 'status'];

/** The item as a person edits it: without the fields the server fills. */
export function editable(item: Item): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(item)) if (!READ_ONLY.includes(k)) out[k] = v;
  return out;
}

export const toYaml = (value: unknown) => stringify(value, { lineWidth: 0 });

const TABS = ['overview', 'yaml', 'json', 'history', 'access'] as const;
/** Views some kinds add: a workload's logs (a replica's terminal opens from its row). */
const KIND_TABS: Record<string, string[]> = { workload: ['logs'] };

/** Kinds whose items act (their name is the subject of the audit events of what they change). */
const PRINCIPALS = ['serviceaccount', 'user'];

export function ItemPage(props: { kind: KindInfo; org: string; gvc?: string; path: string; tab: string; query: URLSearchParams }) {
  const { kind, org, path, tab } = props;
  // The position of the first read: the watch starts there, so nothing that changed since is missed.
  const [since, setSince] = useState<string>();
  const loaded = useLoad(async (signal) => {
    const { body, seq } = await callAt<Item>('GET', path, undefined, { signal });
    setSince((s) => s ?? seq ?? '');
    return body;
  }, [path]);
  const [canEdit, setCanEdit] = useState(false);
  const [changedMeanwhile, setChangedMeanwhile] = useState(false);
  const item = loaded.data;

  useEffect(() => {
    if (!kind.operations.update && !kind.operations.delete) return;
    void mayEdit(path).then(setCanEdit);
  }, [path]);

  // Live: this item's edits (by anyone) and its status, and changes of what belongs to it.
  useEffect(() => {
    if (since === undefined) return;
    return watch(
      org,
      {},
      (event) => {
        const self = selfOf(event.object);
        if (self === path) {
          if (event.type === 'delete') return loaded.reload();
          loaded.setData(event.object);
          setChangedMeanwhile(true);
        } else if (self.startsWith(`${path}/`)) {
          document.dispatchEvent(new CustomEvent('keel-child-change', { detail: event }));
        }
      },
      since || undefined,
      loaded.reload,
    );
  }, [path, since]);

  if (loaded.error) return <ErrorBox error={explain(loaded.error)} />;
  if (!item) return <p>Loading…</p>;

  const tabLink = (t: string) => `#${path}?tab=${t}`;
  return (
    <section>
      <div class="title-row">
        <h1>
          <span class="muted">{kind.kind}</span> {item.name}
        </h1>
        <span class="muted" data-testid="version">
          version {item.version}
        </span>
        {canEdit && kind.operations.delete ? <DeleteButton path={path} name={item.name} after={() => go(path.split('/').slice(0, -1).join('/'))} /> : null}
      </div>
      <SpecSummary kind={kind.kind} item={item} path={path} />
      <nav class="tabs" aria-label="Item views">
        {[...TABS, ...(KIND_TABS[kind.kind] ?? [])].map((t) => (
          <a key={t} href={tabLink(t)} aria-current={tab === t ? 'page' : undefined}>
            {t === 'yaml' ? 'YAML' : t === 'json' ? 'JSON' : t[0].toUpperCase() + t.slice(1)}
          </a>
        ))}
        <a href={`#/org/${org}/-audit?resourceId=${encodeURIComponent(item.id)}`}>Audit trail</a>
        {PRINCIPALS.includes(kind.kind) ? <a href={`#/org/${org}/-audit?subjectName=${encodeURIComponent(item.name)}`}>Changes by {item.name}</a> : null}
      </nav>
      {tab === 'overview' ? <Overview item={item} kind={kind} org={org} path={path} canEdit={canEdit} onChange={loaded.setData} /> : null}
      {tab === 'yaml' ? <YamlEdit item={item} path={path} canEdit={canEdit && kind.operations.update} onSaved={loaded.setData} changedMeanwhile={changedMeanwhile} /> : null}
      {tab === 'json' ? <pre tabIndex={0} class="code" data-testid="json">{JSON.stringify(item, null, 2)}</pre> : null}
      {tab === 'history' ? <History path={path} current={item} canEdit={canEdit && kind.operations.update} onRestored={loaded.setData} /> : null}
      {tab === 'access' ? <AccessReport path={path} /> : null}
      {tab === 'logs' && kind.kind === 'workload' && props.gvc ? (
        <LogsView
          org={org}
          gvc={props.gvc}
          workload={item.name}
          path={path}
          location={props.query.get('location') ?? undefined}
          replica={props.query.get('replica') ?? undefined}
          from={props.query.get('from') ?? undefined}
          search={props.query.get('search') ?? ''}
        />
      ) : null}
      {tab === 'terminal' && kind.kind === 'workload' && props.gvc && props.query.get('location') && props.query.get('replica') ? (
        <LazyTerminal
          key={`${props.query.get('replica')}/${props.query.get('container')}`}
          org={org}
          gvc={props.gvc}
          path={path}
          workload={item}
          location={props.query.get('location')!}
          replica={props.query.get('replica')!}
          container={props.query.get('container') ?? undefined}
        />
      ) : null}
    </section>
  );
}

/** The terminal and xterm.js load when a terminal is first opened, so the initial JavaScript stays small. */
function LazyTerminal(props: Parameters<typeof import('./terminal').TerminalView>[0]) {
  const module = useLoad(() => import('./terminal'), []);
  if (module.error) return <ErrorBox error={explain(module.error)} />;
  if (!module.data) return <p>Loading…</p>;
  const View = module.data.TerminalView;
  return <View {...props} />;
}

function Overview(props: { item: Item; kind: KindInfo; org: string; path: string; canEdit: boolean; onChange: (i: Item) => void }) {
  const { item } = props;
  return (
    <div class="overview">
      <dl class="facts">
        <dt>Name</dt>
        <dd>{item.name}</dd>
        <dt>Description</dt>
        <dd>{item.description ?? ''}</dd>
        <dt>Status</dt>
        <dd data-testid="status-summary">{statusSummary(item)}</dd>
        <dt>Created</dt>
        <dd title={item.created}>{ago(item.created)}</dd>
        <dt>Last change</dt>
        <dd title={item.lastModified}>{ago(item.lastModified)}</dd>
        <dt>Id</dt>
        <dd>
          <code>{item.id}</code>
        </dd>
      </dl>
      <TagsEditor item={item} path={props.path} canEdit={props.canEdit && props.kind.operations.update} onSaved={props.onChange} />
      <KindPanel item={item} kind={props.kind.kind} org={props.org} path={props.path} canEdit={props.canEdit} onChange={props.onChange} />
      {item.status && Object.keys(item.status).length ? (
        <details>
          <summary>Status (raw)</summary>
          <pre tabIndex={0} class="code">{toYaml(item.status)}</pre>
        </details>
      ) : null}
    </div>
  );
}

function TagsEditor(props: { item: Item; path: string; canEdit: boolean; onSaved: (i: Item) => void }) {
  const [key, setKey] = useState('');
  const [value, setValue] = useState('');
  const [error, setError] = useState<string>();
  const save = async (tags: Record<string, unknown>) => {
    try {
      setError(undefined);
      props.onSaved(await call<Item>('PATCH', props.path, { version: props.item.version, tags }));
    } catch (err) {
      setError(explain(err));
    }
  };
  const entries = Object.entries(props.item.tags ?? {});
  return (
    <div class="tags-editor">
      <h2>Tags</h2>
      <ul class="tag-list">
        {entries.map(([k, v]) => (
          <li key={k} class="tag">
            {k}={String(v)}
            {props.canEdit ? (
              <button type="button" class="small" aria-label={`Remove tag ${k}`} onClick={() => save({ [k]: null })}>
                ×
              </button>
            ) : null}
          </li>
        ))}
        {!entries.length ? <li class="muted">No tags.</li> : null}
      </ul>
      {props.canEdit ? (
        <form
          class="inline"
          onSubmit={(e) => {
            e.preventDefault();
            if (key) void save({ [key]: value }).then(() => (setKey(''), setValue('')));
          }}
        >
          <label>
            Tag key <input value={key} onInput={(e) => setKey((e.target as HTMLInputElement).value)} />
          </label>
          <label>
            Value <input value={value} onInput={(e) => setValue((e.target as HTMLInputElement).value)} />
          </label>
          <button type="submit">Add tag</button>
        </form>
      ) : null}
      <ErrorBox error={error} />
    </div>
  );
}

function DeleteButton(props: { path: string; name: string; after: () => void }) {
  const [asking, setAsking] = useState(false);
  const [error, setError] = useState<string>();
  if (!asking)
    return (
      <button type="button" class="danger" onClick={() => setAsking(true)}>
        Delete
      </button>
    );
  return (
    <div class="confirm" role="alertdialog" aria-label="Confirm delete">
      <span>
        Delete <strong>{props.name}</strong>? This cannot be undone.
      </span>
      <button
        type="button"
        class="danger"
        onClick={async () => {
          try {
            await call('DELETE', props.path);
            props.after();
          } catch (err) {
            setError(explain(err));
          }
        }}
      >
        Yes, delete
      </button>
      <button type="button" onClick={() => setAsking(false)}>
        Cancel
      </button>
      <ErrorBox error={error} />
    </div>
  );
}

/** Edit in YAML: the server's dry run shows what would be saved; the save carries the version it started from. */
function YamlEdit(props: { item: Item; path: string; canEdit: boolean; onSaved: (i: Item) => void; changedMeanwhile: boolean }) {
  // The version the edit starts from: each save moves it to the version saved, so the next edit's
  // precondition is the page's own last save and only someone else's change meanwhile is a conflict.
  const [base, setBase] = useState(props.item);
  const original = toYaml(editable(base));
  const [text, setText] = useState(original);
  const [review, setReview] = useState<{ before: string; after: string }>();
  const [conflict, setConflict] = useState<{ mine: string; theirs: Item }>();
  const [error, setError] = useState<string>();
  const [saved, setSaved] = useState(false);
  const startFrom = (item: Item) => {
    setBase(item);
    setText(toYaml(editable(item)));
  };

  const body = () => {
    const parsed = parse(text);
    if (!parsed || typeof parsed !== 'object') throw new Error('The YAML must be a mapping (the item).');
    return { ...parsed, version: base.version };
  };
  const dryRun = async () => {
    setError(undefined);
    setConflict(undefined);
    try {
      const result = await call<Item>('PUT', `${props.path}?dryRun=true`, body());
      setReview({ before: toYaml(editable(base)), after: toYaml(editable(result)) });
    } catch (err) {
      await failed(err);
    }
  };
  const failed = async (err: unknown) => {
    if (err instanceof Problem && err.status === 409) {
      const theirs = await call<Item>('GET', props.path);
      setConflict({ mine: toYaml(editable(base)), theirs });
    }
    setError(err instanceof Error && !(err instanceof Problem) ? `The YAML is not valid: ${err.message}` : explain(err));
  };
  const save = async () => {
    setError(undefined);
    try {
      const result = await call<Item>('PUT', props.path, body());
      startFrom(result);
      setSaved(true);
      setReview(undefined);
      props.onSaved(result);
    } catch (err) {
      await failed(err);
    }
  };

  if (!props.canEdit)
    return (
      <div>
        <p class="muted">Read only: your key may not edit this item.</p>
        <CodeEditor text={toYaml(props.item)} readOnly label="Item YAML (read only)" />
      </div>
    );
  return (
    <div>
      {props.changedMeanwhile && props.item.version > base.version ? (
        <p class="warning" role="status">
          This item changed since you opened it (now version {props.item.version}); saving will be refused with a conflict.
        </p>
      ) : null}
      <CodeEditor text={original} readOnly={false} label="Item YAML" onChange={(t) => (setText(t), setSaved(false))} />
      <div class="actions">
        <button type="button" onClick={dryRun}>
          Review changes (dry run)
        </button>
        {review ? (
          <button type="button" class="primary" onClick={save}>
            Save version {base.version + 1}
          </button>
        ) : null}
        {saved ? <span role="status">Saved.</span> : null}
      </div>
      <ErrorBox error={error} />
      {conflict ? (
        <div data-testid="conflict">
          <h2>Changed meanwhile</h2>
          <p>Someone saved this item after you opened it. What changed since your version:</p>
          <Diff before={conflict.mine} after={toYaml(editable(conflict.theirs))} labels={[`Your starting version ${base.version}`, `Saved meanwhile (version ${conflict.theirs.version})`]} />
          <button
            type="button"
            onClick={() => {
              startFrom(conflict.theirs);
              setConflict(undefined);
              setError(undefined);
            }}
          >
            Edit the current version
          </button>
        </div>
      ) : null}
      {review && !conflict ? (
        <div data-testid="review">
          <h2>What the server would save</h2>
          <Diff before={review.before} after={review.after} labels={['Current', 'After save (server dry run)']} />
        </div>
      ) : null}
    </div>
  );
}

interface Version {
  version: number;
  action: string;
  at: string;
  subject: { name?: string };
  resource: Item;
}

/** Every version from the item's -history; a diff between any two; restore replaces with an old version. */
function History(props: { path: string; current: Item; canEdit: boolean; onRestored: (i: Item) => void }) {
  const versions = useLoad(async (signal) => {
    let page = await call<{ items: Version[]; links: { rel: string; href: string }[] }>('GET', `${props.path}/-history?limit=1000`, undefined, { signal });
    let all = page.items;
    for (let next = page.links.find((l) => l.rel === 'next'); next; next = page.links.find((l) => l.rel === 'next')) {
      page = await call('GET', next.href, undefined, { signal });
      all = all.concat(page.items);
    }
    return all;
  }, [props.path, props.current.version]);
  const [picked, setPicked] = useState<number[]>([]);
  const [error, setError] = useState<string>();
  const [restored, setRestored] = useState<number>();
  if (versions.error) return <ErrorBox error={explain(versions.error)} />;
  if (!versions.data) return <p>Loading…</p>;
  const list = versions.data;
  const toggle = (i: number) => setPicked((p) => (p.includes(i) ? p.filter((x) => x !== i) : [...p.slice(-1), i]));
  // The list is newest first: the higher index is the older version, shown on the left.
  const [a, b] = [...picked].sort((x, y) => x - y).map((i) => list[i]);
  const restore = async (v: Version) => {
    setError(undefined);
    try {
      const result = await call<Item>('PUT', props.path, { ...editable(v.resource), version: props.current.version });
      setRestored(v.version);
      props.onRestored(result);
    } catch (err) {
      setError(explain(err));
    }
  };
  return (
    <div>
      <p class="muted">Pick two versions to compare them.</p>
      <Grid label="Versions" columns={['Compare', 'Version', 'Action', 'By', 'When', 'Restore']}>
        {list.map((v, i) => (
          <tr key={i} data-testid="version-row">
            <td>
              <input type="checkbox" aria-label={`Compare version ${v.version} (${v.action})`} checked={picked.includes(i)} onChange={() => toggle(i)} />
            </td>
            <td>{v.version}</td>
            <td>{v.action}</td>
            <td>{v.subject?.name ?? ''}</td>
            <td title={v.at}>{ago(v.at)}</td>
            <td>
              {props.canEdit && i > 0 && v.action !== 'delete' ? (
                <button type="button" class="small" onClick={() => restore(v)}>
                  Restore version {v.version}
                </button>
              ) : null}
            </td>
          </tr>
        ))}
      </Grid>
      {restored !== undefined ? <p role="status">Restored version {restored} as version {props.current.version}.</p> : null}
      <ErrorBox error={error} />
      {a && b ? <Diff before={toYaml(editable(b.resource))} after={toYaml(editable(a.resource))} labels={[`Version ${b.version}`, `Version ${a.version}`]} /> : null}
    </div>
  );
}

function AccessReport(props: { path: string }) {
  const report = useLoad((signal) => call<{ permissions: { name: string; description: string; bindings: any[] }[] }>('GET', `${props.path}/-accessreport`, undefined, { signal }), [props.path]);
  if (report.error) return <ErrorBox error={explain(report.error)} />;
  if (!report.data) return <p>Loading…</p>;
  return (
    <Grid label="Who can do what" columns={['Permission', 'Granted to']}>
      {report.data.permissions.map((p) => (
        <tr key={p.name}>
          <td title={p.description}>{p.name}</td>
          <td>
            {p.bindings.length
              ? p.bindings.map((b, i) => (
                  <div key={i}>
                    {b.principalLink ?? b.principal ?? JSON.stringify(b)}
                    {b.policyLink ? <span class="muted"> via {b.policyLink}</span> : null}
                  </div>
                ))
              : <span class="muted">nobody</span>}
          </td>
        </tr>
      ))}
    </Grid>
  );
}

/** Create from the kind's template (secrets from the form of their type), with a dry run first. */
export function NewItem(props: { kind: KindInfo; org: string; gvc?: string; collection: string }) {
  const [fromForm, setFromForm] = useState<Record<string, unknown>>();
  if (props.kind.kind === 'secret' && !fromForm) return <SecretForm collection={props.collection} asYaml={setFromForm} />;
  return <NewFromYaml {...props} initial={fromForm ?? templateOf(props.kind.kind, props.org)} />;
}

function NewFromYaml(props: { kind: KindInfo; collection: string; initial: Record<string, unknown> }) {
  const [initial] = useState(() => toYaml(props.initial));
  const [text, setText] = useState(initial);
  const [error, setError] = useState<string>();
  const [checked, setChecked] = useState<string>();
  const submit = async (dryRun: boolean) => {
    setError(undefined);
    try {
      const body = parse(text);
      const created = await call<Item>('POST', `${props.collection}${dryRun ? '?dryRun=true' : ''}`, body);
      if (dryRun) setChecked(toYaml(editable(created)));
      else go(selfOf(created));
    } catch (err) {
      setError(err instanceof Problem ? explain(err) : `The YAML is not valid: ${(err as Error).message}`);
    }
  };
  return (
    <section>
      <h1>New {props.kind.kind}</h1>
      <CodeEditor text={initial} readOnly={false} label={`New ${props.kind.kind} YAML`} onChange={setText} />
      <div class="actions">
        <button type="button" onClick={() => submit(true)}>
          Check (dry run)
        </button>
        <button type="button" class="primary" onClick={() => submit(false)}>
          Create
        </button>
      </div>
      <ErrorBox error={error} />
      {checked ? (
        <div>
          <h2>The server would create</h2>
          <pre tabIndex={0} class="code">{checked}</pre>
        </div>
      ) : null}
    </section>
  );
}
