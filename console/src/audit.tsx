// The audit trail: the Audit API (on its own port, found through /discovery) with its filters, newest
// first. The filters are the route's query, so a filtered trail is a link like any other page. Keel's
// reconcilers record each status change they write as an event of the action `status` (subject
// `keel`); in the platform context no one else writes that action, and those events are hidden
// unless asked for.
import { useEffect, useRef, useState } from 'preact/hooks';
import { auditApi, call, explain, type KindInfo } from './api';
import { go } from './route';
import { ErrorBox, Grid } from './widgets';

interface Filter {
  param: string;
  label: string;
  /** A time: typed in the browser's local time, sent as an ISO 8601 instant. */
  time?: boolean;
  /** Values offered while typing (any other value may still be typed). */
  suggest?: string;
}

const FILTERS: Filter[] = [
  { param: 'resourceType', label: 'Kind', suggest: 'audit-kinds' },
  { param: 'resourceName', label: 'Name' },
  { param: 'resourceId', label: 'Id' },
  { param: 'subjectName', label: 'Subject' },
  { param: 'actionType', label: 'Action', suggest: 'audit-actions' },
  { param: 'fromEvent', label: 'From', time: true },
  { param: 'toEvent', label: 'To', time: true },
  { param: 'contextName', label: 'Context' },
];

/** The actions Keel records in the platform context (custom contexts may hold others). */
const ACTIONS = ['create', 'edit', 'delete', 'status', 'addKey'];

/** An ISO instant as a datetime-local input shows it (local time, to the millisecond, as the Audit API keeps it). */
function toLocalInput(iso: string): string {
  const t = new Date(iso);
  if (Number.isNaN(t.getTime())) return iso;
  return new Date(t.getTime() - t.getTimezoneOffset() * 60_000).toISOString().slice(0, 23);
}

interface AuditEvent {
  id: string;
  eventTime: string;
  subject: { name: string };
  action: { type: string };
  resource: { type: string; name: string; id: string; link?: string };
  context: { name: string };
  [k: string]: unknown;
}

export function AuditTrail(props: { org: string; query: URLSearchParams; kinds: KindInfo[] }) {
  const qs = props.query.toString();
  const applied = () => Object.fromEntries(FILTERS.map((f) => [f.param, props.query.get(f.param) ?? '']));
  const inputsOf = (values: Record<string, string>) => Object.fromEntries(FILTERS.map((f) => [f.param, f.time && values[f.param] ? toLocalInput(values[f.param]) : values[f.param]]));
  const [form, setForm] = useState<Record<string, string>>(() => inputsOf(applied()));
  const showStatus = props.query.get('showStatus') === '1';
  const [events, setEvents] = useState<AuditEvent[]>([]);
  const [next, setNext] = useState<string>();
  const [error, setError] = useState<string>();
  const [loading, setLoading] = useState(true);
  // The filters a page belongs to: pages of filters no longer shown are dropped.
  const shown = useRef<AbortController>(undefined);

  const fetchPage = async (href: string, signal: AbortSignal) =>
    call<{ items: AuditEvent[]; links: { rel: string; href: string }[] }>('GET', href, undefined, { base: await auditApi(), signal });

  // The first page of the filters in the route.
  useEffect(() => {
    const values = applied();
    setForm(inputsOf(values));
    setEvents([]);
    setNext(undefined);
    setError(undefined);
    setLoading(true);
    const ctl = new AbortController();
    shown.current = ctl;
    const params = new URLSearchParams(Object.entries(values).filter(([, v]) => v));
    params.set('limit', '50');
    params.set('direction', 'backward');
    // Asking for status events by their action shows them whatever the toggle says.
    if (!showStatus && !values.actionType) params.set('exceptActionType', 'status');
    fetchPage(`/audit/org/${encodeURIComponent(props.org)}?${params}`, ctl.signal).then(
      (page) => {
        if (ctl.signal.aborted) return;
        setEvents(page.items);
        setNext(page.links.find((l) => l.rel === 'next')?.href);
        setLoading(false);
      },
      (err) => {
        if (ctl.signal.aborted) return;
        setError(explain(err));
        setLoading(false);
      },
    );
    return () => ctl.abort();
  }, [props.org, qs]);

  const loadMore = async (href: string) => {
    const ctl = shown.current!;
    setLoading(true);
    try {
      const page = await fetchPage(href, ctl.signal);
      if (ctl.signal.aborted) return;
      setEvents((current) => [...current, ...page.items]);
      setNext(page.links.find((l) => l.rel === 'next')?.href);
    } catch (err) {
      if (!ctl.signal.aborted) setError(explain(err));
    } finally {
      if (!ctl.signal.aborted) setLoading(false);
    }
  };

  const apply = (e: Event) => {
    e.preventDefault();
    const params = new URLSearchParams();
    for (const f of FILTERS) {
      const value = form[f.param]?.trim();
      if (value) params.set(f.param, f.time ? new Date(value).toISOString() : value);
    }
    if (showStatus) params.set('showStatus', '1');
    go(`/org/${props.org}/-audit?${params}`);
  };
  const toggleStatus = (show: boolean) => {
    const params = new URLSearchParams(props.query);
    if (show) params.set('showStatus', '1');
    else params.delete('showStatus');
    go(`/org/${props.org}/-audit${params.size ? `?${params}` : ''}`);
  };

  return (
    <section>
      <h1>Audit trail</h1>
      <form class="filters wrap" onSubmit={apply}>
        {FILTERS.map((f) => (
          <label key={f.param}>
            {f.label}{' '}
            <input
              name={f.param}
              type={f.time ? 'datetime-local' : 'text'}
              step={f.time ? 0.001 : undefined}
              list={f.suggest}
              value={form[f.param]}
              onInput={(e) => setForm({ ...form, [f.param]: (e.target as HTMLInputElement).value })}
            />
          </label>
        ))}
        <datalist id="audit-kinds">
          {props.kinds.map((k) => (
            <option key={k.kind} value={k.kind} />
          ))}
        </datalist>
        <datalist id="audit-actions">
          {ACTIONS.map((a) => (
            <option key={a} value={a} />
          ))}
        </datalist>
        <button type="submit">Apply filters</button>
        {qs ? (
          <a href={`#/org/${props.org}/-audit`} class="clear">
            Clear filters
          </a>
        ) : null}
      </form>
      <div class="check">
        <input id="show-status" type="checkbox" checked={showStatus} onChange={(e) => toggleStatus((e.target as HTMLInputElement).checked)} />
        <label for="show-status">Show Keel's status events (written by its reconcilers)</label>
      </div>
      <p class="muted">Newest first.</p>
      <ErrorBox error={error} />
      <Grid label="Audit events" columns={['Time', 'Subject', 'Action', 'Resource', 'Event']}>
        {events.map((e) => (
          <tr key={e.id} data-testid="audit-row">
            <td data-testid="audit-time">{e.eventTime}</td>
            <td data-testid="audit-subject">{e.subject?.name}</td>
            <td data-testid="audit-action">{e.action?.type}</td>
            <td data-testid="audit-resource">
              {e.resource?.link ? <a href={`#${e.resource.link}`}>{`${e.resource.type}/${e.resource.name}`}</a> : `${e.resource?.type ?? ''}/${e.resource?.name ?? ''}`}
            </td>
            <td>
              <details>
                <summary>Raw JSON</summary>
                <pre tabIndex={0} class="code">{JSON.stringify(e, null, 2)}</pre>
              </details>
            </td>
          </tr>
        ))}
      </Grid>
      {loading ? <p class="muted">Loading…</p> : !events.length && !error ? <p class="muted" data-testid="audit-empty">No events match.</p> : null}
      {next ? (
        <button type="button" onClick={() => loadMore(next)} disabled={loading}>
          Load more
        </button>
      ) : null}
    </section>
  );
}
