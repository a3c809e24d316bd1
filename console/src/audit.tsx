// The audit trail: the Audit API (on its own port, found through /discovery) with its filters.
import { useEffect, useState } from 'preact/hooks';
import { auditApi, call, explain } from './api';
import { ErrorBox, go, Grid } from './widgets';

const FILTERS: Array<[string, string]> = [
  ['resourceType', 'Kind'],
  ['resourceName', 'Name'],
  ['resourceId', 'Id'],
  ['subjectName', 'Subject'],
  ['actionType', 'Action'],
  ['fromEvent', 'From (ISO time)'],
  ['toEvent', 'To (ISO time)'],
  ['contextName', 'Context'],
];

interface AuditEvent {
  id: string;
  eventTime: string;
  subject: { name: string };
  action: { type: string };
  resource: { type: string; name: string; id: string; link?: string };
  context: { name: string };
  [k: string]: unknown;
}

export function AuditTrail(props: { org: string; query: URLSearchParams }) {
  const initial = Object.fromEntries(FILTERS.map(([k]) => [k, props.query.get(k) ?? '']));
  const [form, setForm] = useState<Record<string, string>>(initial);
  const [events, setEvents] = useState<AuditEvent[]>([]);
  const [next, setNext] = useState<string>();
  const [error, setError] = useState<string>();
  const [loading, setLoading] = useState(false);
  const qs = props.query.toString();

  const load = async (href?: string) => {
    setLoading(true);
    setError(undefined);
    try {
      const base = await auditApi();
      const params = new URLSearchParams();
      for (const [k] of FILTERS) if (initial[k]) params.set(k, initial[k]);
      params.set('limit', '50');
      const page = await call<{ items: AuditEvent[]; links: { rel: string; href: string }[] }>('GET', href ?? `/audit/org/${props.org}?${params}`, undefined, { base });
      setEvents((current) => (href ? [...current, ...page.items] : page.items));
      setNext(page.links.find((l) => l.rel === 'next')?.href);
    } catch (err) {
      setError(explain(err));
    } finally {
      setLoading(false);
    }
  };
  useEffect(() => {
    setForm(initial);
    void load();
  }, [props.org, qs]);

  return (
    <section>
      <h1>Audit trail</h1>
      <form
        class="filters wrap"
        onSubmit={(e) => {
          e.preventDefault();
          const params = new URLSearchParams(Object.entries(form).filter(([, v]) => v));
          go(`/org/${props.org}/-audit?${params}`);
        }}
      >
        {FILTERS.map(([k, label]) => (
          <label key={k}>
            {label} <input name={k} value={form[k]} onInput={(e) => setForm({ ...form, [k]: (e.target as HTMLInputElement).value })} />
          </label>
        ))}
        <button type="submit">Apply filters</button>
      </form>
      <ErrorBox error={error} />
      <Grid label="Audit events" columns={['Time', 'Subject', 'Action', 'Resource', 'Event']}>
        {events.map((e) => (
          <tr key={e.id} data-testid="audit-row">
            <td>{e.eventTime}</td>
            <td data-testid="audit-subject">{e.subject?.name}</td>
            <td>{e.action?.type}</td>
            <td>
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
      {!events.length && !loading ? <p class="muted">No events match.</p> : null}
      {next ? (
        <button type="button" onClick={() => load(next)} disabled={loading}>
          Load more
        </button>
      ) : null}
    </section>
  );
}
