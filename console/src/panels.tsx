// The parts of an item's overview that only some kinds have. Each reads and writes through the
// same public API as any client; a kind without a panel shows the generic overview only.
import { useEffect, useState } from 'preact/hooks';
import { call, explain, mayDo, selfOf, type Item, type ListBody, type WatchEvent } from './api';
import { ErrorBox, ago, useLoad, Grid } from './widgets';

interface PanelProps {
  item: Item;
  kind: string;
  org: string;
  path: string;
  canEdit: boolean;
  onChange: (i: Item) => void;
}

export function KindPanel(props: PanelProps) {
  switch (props.kind) {
    case 'workload':
      return <WorkloadPanel {...props} />;
    case 'volumeset':
      return <VolumeSetPanel {...props} />;
    case 'domain':
      return <DomainPanel {...props} />;
    case 'secret':
      return <SecretPanel {...props} />;
    case 'serviceaccount':
      return <ServiceAccountPanel {...props} />;
    case 'policy':
      return <PolicyPanel {...props} />;
    default:
      return null;
  }
}

/**
 * Follows the item's children of one sort (its deployments, its commands) as the item page hears
 * them from -watch: each event shows at once (so every stage a command passes through is seen),
 * and a re-read follows, which is at least as new as the event.
 */
function useChildChanges(collection: string, list: { setData: (d: (current: ListBody | undefined) => ListBody | undefined) => void; reload: () => void }): void {
  useEffect(() => {
    const on = (e: Event) => {
      const event = (e as CustomEvent<WatchEvent>).detail;
      const self = selfOf(event.object);
      if (!self.startsWith(`${collection}/`)) return;
      list.setData((current) => {
        if (!current) return current;
        if (event.type === 'delete') return { ...current, items: current.items.filter((i) => selfOf(i) !== self) };
        const at = current.items.findIndex((i) => selfOf(i) === self);
        const items = [...current.items];
        if (at >= 0) items[at] = event.object;
        else items.unshift(event.object);
        return { ...current, items };
      });
      list.reload();
    };
    document.addEventListener('keel-child-change', on);
    return () => document.removeEventListener('keel-child-change', on);
  }, [collection]);
}

function Commands(props: { path: string }) {
  const commands = useLoad((signal) => call<ListBody>('GET', `${props.path}/-command`, undefined, { signal }), [props.path]);
  useChildChanges(`${props.path}/-command`, commands);
  return (
    <div>
      <h2>Commands</h2>
      <ErrorBox error={commands.error ? explain(commands.error) : undefined} />
      {commands.data?.items.length ? (
        <Grid label="Commands" columns={['Type', 'Stage', 'Requested', 'Spec']}>
          {commands.data.items.map((c) => (
            <tr key={c.id}>
              <td>{c.type}</td>
              <td data-testid="command-stage">{c.lifecycleStage}</td>
              <td title={c.created}>{ago(c.created)}</td>
              <td>
                <code>{JSON.stringify(c.spec)}</code>
              </td>
            </tr>
          ))}
        </Grid>
      ) : (
        <p class="muted">No commands.</p>
      )}
    </div>
  );
}

function WorkloadPanel(props: PanelProps) {
  const { item, path } = props;
  const deployments = useLoad((signal) => call<ListBody>('GET', `${path}/deployment`, undefined, { signal }), [path, item.version]);
  useChildChanges(`${path}/deployment`, deployments);
  const [error, setError] = useState<string>();
  const [done, setDone] = useState<string>();
  const act = async (label: string, run: () => Promise<unknown>) => {
    setError(undefined);
    setDone(undefined);
    try {
      const result = await run();
      if (result && typeof result === 'object' && 'kind' in result && (result as Item).kind === 'workload') props.onChange(result as Item);
      setDone(label);
    } catch (err) {
      setError(explain(err));
    }
  };
  const suspended = item.spec?.defaultOptions?.suspend === true;
  const cron = item.spec?.type === 'cron';
  // Running a cron job has a permission of its own (exec.runCronWorkload), apart from edit.
  const [canRun, setCanRun] = useState(false);
  useEffect(() => {
    if (cron) void mayDo(path, 'exec.runCronWorkload').then(setCanRun);
  }, [path, cron]);
  // As `cpln workload stop/start` does: a location's own options override the defaults, so they are suspended (or resumed) too.
  const localOptions: any[] = Array.isArray(item.spec?.localOptions) ? item.spec.localOptions : [];
  const suspension = (on: boolean) => ({ spec: { defaultOptions: { suspend: on }, ...(localOptions.length ? { localOptions: localOptions.map((o) => ({ ...o, suspend: on })) } : {}) } });
  return (
    <div>
      <h2>Deployments</h2>
      {suspended ? (
        <p class="warning" data-testid="suspended">
          Suspended: {cron ? 'the schedule starts no runs' : 'no replicas run'} until resumed.
        </p>
      ) : null}
      <ErrorBox error={deployments.error ? explain(deployments.error) : undefined} />
      <Grid label="Deployments" columns={['Location', 'Ready', 'Message', 'Versions', 'Endpoint', ...(cron && canRun ? ['Run'] : [])]}>
        {(deployments.data?.items ?? []).map((d) => (
          <tr key={d.name} data-testid="deployment-row">
            <td>{d.name}</td>
            <td data-testid="deployment-ready">{d.status?.ready ? 'Ready' : 'Not ready'}</td>
            <td>{d.status?.message ?? ''}</td>
            <td data-testid="deployment-versions">{(d.status?.versions ?? []).map((v: any) => `v${v.workload}${v.ready ? ' ✓' : ' …'}`).join(', ')}</td>
            <td class="ellipsis">{d.status?.endpoint ?? ''}</td>
            {cron && canRun ? (
              <td>
                {/* A run starts in one location: a runCronWorkload command must name it (spec.location). */}
                <button type="button" class="small" onClick={() => act(`Run requested in ${d.name}.`, () => call('POST', `${path}/-command`, { type: 'runCronWorkload', spec: { location: d.name } }))}>
                  Run now in {d.name}
                </button>
              </td>
            ) : null}
          </tr>
        ))}
      </Grid>
      {deployments.data && !deployments.data.items.length ? <p class="muted">No deployments yet.</p> : null}
      {props.canEdit ? (
        <div class="actions">
          <button type="button" onClick={() => act('Redeployment requested.', () => call('PATCH', path, { tags: { 'cpln/deployTimestamp': new Date().toISOString() } }))}>
            Force redeploy
          </button>
          <button type="button" onClick={() => act(suspended ? 'Resumed.' : 'Suspended.', () => call('PATCH', path, suspension(!suspended)))}>
            {suspended ? 'Resume' : 'Suspend'}
          </button>
        </div>
      ) : null}
      {done ? (
        <p role="status" class="muted">
          {done}
        </p>
      ) : null}
      <ErrorBox error={error} />
      {cron ? <CronRuns path={path} deployments={deployments.data?.items ?? []} /> : null}
      <Replicas path={path} deployments={deployments.data?.items ?? []} cron={cron} />
      <Commands path={path} />
    </div>
  );
}

/** The replicas each deployment runs (a cron workload's: its active runs), with their logs and a terminal. */
function Replicas(props: { path: string; deployments: Item[]; cron: boolean }) {
  const rows = props.deployments.flatMap((d) => ((d.status?.internal?.replicas ?? []) as unknown[]).filter((r): r is string => typeof r === 'string').map((replica) => ({ location: d.name, replica })));
  const at = (tab: string, r: { location: string; replica: string }) => `#${props.path}?tab=${tab}&location=${encodeURIComponent(r.location)}&replica=${encodeURIComponent(r.replica)}`;
  return (
    <div>
      <h2>Replicas</h2>
      {rows.length ? (
        <Grid label="Replicas" columns={['Location', 'Replica', 'Logs', 'Terminal']}>
          {rows.map((r) => (
            <tr key={`${r.location}/${r.replica}`} data-testid="replica-row">
              <td>{r.location}</td>
              <td>
                <code>{r.replica}</code>
              </td>
              <td>
                <a href={at('logs', r)}>Logs of {r.replica}</a>
              </td>
              <td>
                <a href={at('terminal', r)}>Terminal in {r.replica}</a>
              </td>
            </tr>
          ))}
        </Grid>
      ) : (
        <p class="muted">{props.cron ? 'No run is active now.' : 'No replica runs now.'}</p>
      )}
    </div>
  );
}

/** The exit code a run's message tells ("Completed (exit code 0)", "Failed: … exited (exit code 3)"); a run that succeeded exited 0. */
function exitCodeOf(run: any): string {
  const messages = [...(run.conditions ?? []).map((c: any) => c.message), ...Object.values(run.containers ?? {}).map((c: any) => c?.message)];
  for (const m of messages) {
    const code = typeof m === 'string' ? /exit code (\d+)/.exec(m)?.[1] : undefined;
    if (code !== undefined) return code;
  }
  return run.status === 'successful' ? '0' : '';
}

/** A cron workload's runs (each deployment's status.jobExecutions), newest first, each with its logs. */
function CronRuns(props: { path: string; deployments: Item[] }) {
  const runs = props.deployments
    .flatMap((d) => ((d.status?.jobExecutions ?? []) as any[]).map((run) => ({ location: d.name as string, run })))
    .sort((a, b) => String(b.run.startTime ?? '').localeCompare(String(a.run.startTime ?? '')));
  const logs = (r: { location: string; run: any }) =>
    `#${props.path}?tab=logs&location=${encodeURIComponent(r.location)}&replica=${encodeURIComponent(r.run.replica)}${r.run.startTime ? `&from=${encodeURIComponent(r.run.startTime)}` : ''}`;
  return (
    <div>
      <h2>Runs</h2>
      {runs.length ? (
        <Grid label="Runs" columns={['Location', 'Run', 'Status', 'Exit code', 'Started', 'Ended', 'Message', 'Logs']}>
          {runs.map((r) => {
            const message = (r.run.conditions ?? []).find((c: any) => c.message)?.message ?? Object.values(r.run.containers ?? {}).map((c: any) => c?.message).find(Boolean) ?? '';
            return (
              <tr key={`${r.location}/${r.run.name}`} data-testid="run-row">
                <td>{r.location}</td>
                <td>
                  <code>{r.run.replica ?? r.run.name}</code>
                </td>
                <td data-testid="run-status">{r.run.status}</td>
                <td data-testid="run-exit-code">{exitCodeOf(r.run)}</td>
                <td title={r.run.startTime}>{r.run.startTime ? new Date(r.run.startTime).toLocaleString() : ''}</td>
                <td title={r.run.completionTime}>{r.run.completionTime ? new Date(r.run.completionTime).toLocaleString() : r.run.status === 'active' ? 'running' : ''}</td>
                <td>{message}</td>
                <td>{r.run.replica ? <a href={logs(r)}>Logs of run {r.run.replica}</a> : null}</td>
              </tr>
            );
          })}
        </Grid>
      ) : (
        <p class="muted">No runs yet.</p>
      )}
    </div>
  );
}

function VolumeSetPanel(props: PanelProps) {
  const locations: any[] = props.item.status?.locations ?? [];
  const snapshots: any[] = props.item.status?.snapshots ?? [];
  return (
    <div>
      <h2>Volumes per location</h2>
      {locations.length ? (
        <Grid label="Volumes" columns={['Location', 'Volume', 'Lifecycle', 'Capacity (GB)', 'Snapshots']}>
          {locations.flatMap((l) =>
            (l.volumes ?? []).map((v: any, i: number) => (
              <tr key={`${l.name}-${i}`}>
                <td>{l.name}</td>
                <td>{v.index ?? i}</td>
                <td>{v.lifecycle ?? ''}</td>
                <td>{v.storageCapacity ?? ''}</td>
                <td>{(v.volumeSnapshots ?? v.snapshots ?? []).map((s: any) => s.name).join(', ')}</td>
              </tr>
            )),
          )}
        </Grid>
      ) : (
        <p class="muted">No volumes yet (a workload that mounts this set creates them).</p>
      )}
      {snapshots.length ? <pre tabIndex={0} class="code">{JSON.stringify(snapshots, null, 2)}</pre> : null}
      <Commands path={props.path} />
    </div>
  );
}

function DomainPanel(props: PanelProps) {
  const records: any[] = props.item.status?.dnsConfig ?? [];
  return (
    <div>
      <h2>DNS records to create</h2>
      {records.length ? (
        <Grid label="DNS records" columns={['Type', 'Host', 'Value', 'TTL']}>
          {records.map((r, i) => (
            <tr key={i}>
              <td>{r.type}</td>
              <td>{r.host}</td>
              <td>
                <code>{r.value}</code>
              </td>
              <td>{r.ttl}</td>
            </tr>
          ))}
        </Grid>
      ) : (
        <p class="muted">No DNS records reported yet.</p>
      )}
      {props.item.status?.status ? <p>Domain status: {String(props.item.status.status)}</p> : null}
    </div>
  );
}

/**
 * Values stay hidden until revealed, which needs the `reveal` permission (GET …/-reveal). Whether
 * the key has it is read from the permissions Keel reports it holds on the secret (…/-granted), so
 * the value never leaves the server until a person asks to see it.
 */
function SecretPanel(props: PanelProps) {
  const [value, setValue] = useState<unknown>();
  const [error, setError] = useState<string>();
  const mayReveal = useLoad(() => mayDo(props.path, 'reveal'), [props.path]);
  return (
    <div>
      <h2>Value ({props.item.type})</h2>
      {value === undefined ? (
        <p>
          <span class="muted">Hidden. </span>
          {mayReveal.data === true ? (
            <button
              type="button"
              onClick={async () => {
                try {
                  setValue((await call<Item>('GET', `${props.path}/-reveal`)).data ?? null);
                } catch (err) {
                  setError(explain(err));
                }
              }}
            >
              Reveal
            </button>
          ) : mayReveal.data === false ? (
            <span data-testid="no-reveal">Your key may not reveal this secret (it lacks the reveal permission).</span>
          ) : null}
        </p>
      ) : (
        <div>
          <pre tabIndex={0} class="code" data-testid="secret-value">{typeof value === 'string' ? value : JSON.stringify(value, null, 2)}</pre>
          <button type="button" onClick={() => setValue(undefined)}>
            Hide
          </button>
        </div>
      )}
      <ErrorBox error={error} />
    </div>
  );
}

/** Mint a key (shown once, with a copy button); revoke keys. */
function ServiceAccountPanel(props: PanelProps) {
  const [description, setDescription] = useState('');
  const [minted, setMinted] = useState<string>();
  const [copied, setCopied] = useState(false);
  const [error, setError] = useState<string>();
  const keys: any[] = props.item.keys ?? [];
  const refresh = async () => props.onChange(await call<Item>('GET', props.path));
  return (
    <div>
      <h2>Keys</h2>
      {minted ? (
        <div class="minted" role="status">
          <p>
            <strong>Copy this key now: it is shown only once.</strong>
          </p>
          <code data-testid="minted-key">{minted}</code>{' '}
          <button
            type="button"
            onClick={async () => {
              // The clipboard needs a secure context (https or localhost) and the page's focus; say so when it is refused.
              try {
                if (!navigator.clipboard) throw new Error('no clipboard here');
                await navigator.clipboard.writeText(minted);
                setCopied(true);
              } catch {
                setCopied(false);
                setError('The browser refused the copy: select the key above and copy it by hand.');
              }
            }}
          >
            {copied ? 'Copied' : 'Copy'}
          </button>
        </div>
      ) : null}
      <Grid label="Keys" columns={['Key', 'Description', 'Created', 'Revoke']}>
        {keys.map((k) => (
          <tr key={k.name}>
            <td>
              <code>{k.name}</code>
            </td>
            <td>{k.description}</td>
            <td title={k.created}>{ago(k.created)}</td>
            <td>
              {props.canEdit ? (
                <button
                  type="button"
                  class="small danger"
                  onClick={async () => {
                    try {
                      props.onChange(await call<Item>('PATCH', props.path, { '$drop/keys': [k.name] }));
                    } catch (err) {
                      setError(explain(err));
                    }
                  }}
                >
                  Revoke {k.name}
                </button>
              ) : null}
            </td>
          </tr>
        ))}
      </Grid>
      {props.canEdit ? (
        <form
          class="inline"
          onSubmit={async (e) => {
            e.preventDefault();
            try {
              const result = await call<{ key: string }>('POST', `${props.path}/-addKey`, { description: description || 'console' });
              setMinted(result.key);
              setCopied(false);
              await refresh();
            } catch (err) {
              setError(explain(err));
            }
          }}
        >
          <label>
            Key description <input value={description} onInput={(e) => setDescription((e.target as HTMLInputElement).value)} />
          </label>
          <button type="submit">Mint key</button>
        </form>
      ) : null}
      <ErrorBox error={error} />
    </div>
  );
}

interface Binding {
  permissions: string[];
  principalLinks: string[];
}

/** Bindings editor: each binding's permissions picked from the target kind's permission schema. */
function PolicyPanel(props: PanelProps) {
  const targetKind = String(props.item.targetKind ?? '');
  const schema = useLoad(
    (signal) => call<{ items: { name: string; description: string }[] }>('GET', `/org/${props.org}/${targetKind}/-schema/permissions`, undefined, { signal }),
    [targetKind],
  );
  const [bindings, setBindings] = useState<Binding[]>(() => structuredClone(props.item.bindings ?? []));
  const [error, setError] = useState<string>();
  const [saved, setSaved] = useState(false);
  useEffect(() => setBindings(structuredClone(props.item.bindings ?? [])), [props.item.version]);
  const update = (i: number, change: Partial<Binding>) => {
    setSaved(false);
    setBindings((bs) => bs.map((b, j) => (j === i ? { ...b, ...change } : b)));
  };
  const perms = schema.data?.items ?? [];
  return (
    <div>
      <h2>Bindings</h2>
      <p class="muted">
        Target kind {targetKind}; {props.item.targetLinks?.length ? `${props.item.targetLinks.length} target link(s)` : props.item.target === 'all' ? 'all items' : 'no targets yet'}.
      </p>
      {bindings.map((b, i) => (
        <fieldset key={i} class="binding" disabled={!props.canEdit}>
          <legend>Binding {i + 1}</legend>
          <div class="perms">
            {perms.map((p) => (
              <label key={p.name} title={p.description}>
                <input
                  type="checkbox"
                  checked={b.permissions.includes(p.name)}
                  onChange={(e) => update(i, { permissions: (e.target as HTMLInputElement).checked ? [...b.permissions, p.name] : b.permissions.filter((x) => x !== p.name) })}
                />{' '}
                {p.name}
              </label>
            ))}
          </div>
          <label>
            Principal links (one per line)
            <textarea rows={3} value={b.principalLinks.join('\n')} onInput={(e) => update(i, { principalLinks: (e.target as HTMLTextAreaElement).value.split('\n').map((s) => s.trim()).filter(Boolean) })} />
          </label>
          {props.canEdit ? (
            <button type="button" class="small" onClick={() => setBindings((bs) => bs.filter((_, j) => j !== i))}>
              Remove binding {i + 1}
            </button>
          ) : null}
        </fieldset>
      ))}
      {props.canEdit ? (
        <div class="actions">
          <button type="button" onClick={() => setBindings((bs) => [...bs, { permissions: [], principalLinks: [] }])}>
            Add binding
          </button>
          <button
            type="button"
            class="primary"
            onClick={async () => {
              setError(undefined);
              try {
                props.onChange(await call<Item>('PATCH', props.path, { version: props.item.version, bindings }));
                setSaved(true);
              } catch (err) {
                setError(explain(err));
              }
            }}
          >
            Save bindings
          </button>
          {saved ? <span role="status">Saved.</span> : null}
        </div>
      ) : null}
      <ErrorBox error={error ?? (schema.error ? explain(schema.error) : undefined)} />
    </div>
  );
}
