// A workload's or one replica's logs, live: the logs API's tail (a WebSocket, with the signed-in key)
// of the LogQL selector of what the page shows, plus a line filter typed in the search box. Pause
// closes the tail and Resume opens a new one just after the last line shown, so no line is missed
// or shown twice.
import { useEffect, useRef, useState } from 'preact/hooks';
import { tail, type LogLine } from './api';
import { go } from './route';
import { ErrorBox } from './widgets';

/** Lines kept on the page; older ones scroll out. */
const KEEP = 2000;
/** Lines of history a new tail starts with. */
const HISTORY = 500;
const HOUR_NS = 3_600_000_000_000n;
/** How long after a dropped tail a new one is opened. */
const REOPEN_MS = 2000;

/** A LogQL string: JSON's escapes are LogQL's. */
const quoted = (text: string) => JSON.stringify(text);

const timeOf = (ns: string) => new Date(Number(BigInt(ns) / 1_000_000n));
/** A line's time of day in the browser's time zone, to the millisecond. */
const clock = (t: Date) => `${t.toLocaleTimeString(undefined, { hour12: false })}.${String(t.getMilliseconds()).padStart(3, '0')}`;

export function selectorOf(gvc: string, workload: string, location?: string, replica?: string): string {
  const labels = [`gvc=${quoted(gvc)}`, `workload=${quoted(workload)}`];
  if (location) labels.push(`location=${quoted(location)}`);
  if (replica) labels.push(`replica=${quoted(replica)}`);
  return `{${labels.join(', ')}}`;
}

export function LogsView(props: { org: string; gvc: string; workload: string; path: string; location?: string; replica?: string; from?: string; search: string }) {
  const { org, gvc, workload, location, replica } = props;
  const [lines, setLines] = useState<LogLine[]>([]);
  const [typed, setTyped] = useState(props.search);
  const [paused, setPaused] = useState(false);
  const [state, setState] = useState<'connecting' | 'live' | 'paused' | 'closed'>('connecting');
  const [error, setError] = useState<string>();
  /** Tails that dropped: each opens a new one. */
  const [drops, setDrops] = useState(0);
  /** The time of the last line shown (ns): a resumed tail starts just after it. */
  const last = useRef<string | undefined>(undefined);
  const box = useRef<HTMLDivElement>(null);
  const query = `${selectorOf(gvc, workload, location, replica)}${props.search ? ` |= ${quoted(props.search)}` : ''}`;

  // A new search starts over: the history of the last hour (or since the run began) that matches it.
  useEffect(() => {
    setLines([]);
    last.current = undefined;
  }, [query, props.from]);

  useEffect(() => {
    if (paused) {
      setState('paused');
      return;
    }
    let stop: (() => void) | undefined;
    let retry: ReturnType<typeof setTimeout> | undefined;
    let gone = false;
    setError(undefined);
    setState('connecting');
    const fromMs = props.from ? Date.parse(props.from) - 60_000 : NaN;
    const start = last.current !== undefined ? (BigInt(last.current) + 1n).toString() : Number.isNaN(fromMs) ? (BigInt(Date.now()) * 1_000_000n - HOUR_NS).toString() : (BigInt(fromMs) * 1_000_000n).toString();
    void tail(org, query, start, HISTORY, {
      lines: (arrived) => {
        if (!arrived.length) return;
        setState('live');
        last.current = arrived[arrived.length - 1].ts;
        setLines((current) => current.concat(arrived).slice(-KEEP));
      },
      closed: (why, reopen) => {
        setState('closed');
        setError(reopen ? `${why}; reconnecting…` : why);
        // A dropped tail is opened again from just after the last line shown.
        if (reopen) retry = setTimeout(() => setDrops((n) => n + 1), REOPEN_MS);
      },
    }).then(
      (close) => {
        if (gone) close();
        else {
          stop = close;
          setState((s) => (s === 'connecting' ? 'live' : s));
        }
      },
      (err) => setError(String((err as Error).message ?? err)),
    );
    return () => {
      gone = true;
      clearTimeout(retry);
      stop?.();
    };
  }, [query, paused, props.from, drops]);

  // Follow new lines while the reader is at the bottom; a reader who scrolled up stays where they are.
  useEffect(() => {
    const el = box.current;
    if (el && el.scrollHeight - el.scrollTop - el.clientHeight < 80) el.scrollTop = el.scrollHeight;
  }, [lines]);

  const what = replica ? `replica ${replica}` : location ? `${workload} in ${location}` : `workload ${workload}`;
  return (
    <div class="logs">
      <h2>Logs of {what}</h2>
      <form
        class="filters"
        role="search"
        onSubmit={(e) => {
          e.preventDefault();
          const params = new URLSearchParams({ tab: 'logs' });
          if (location) params.set('location', location);
          if (replica) params.set('replica', replica);
          if (props.from) params.set('from', props.from);
          if (typed.trim()) params.set('search', typed.trim());
          go(`${props.path}?${params}`);
        }}
      >
        <label>
          Lines containing <input name="search" value={typed} onInput={(e) => setTyped((e.target as HTMLInputElement).value)} />
        </label>
        <button type="submit">Search</button>
        <button type="button" onClick={() => setPaused((p) => !p)} aria-pressed={paused}>
          {paused ? 'Resume' : 'Pause'}
        </button>
        <span class="muted" role="status" data-testid="logs-state">
          {state === 'live' ? 'Live' : state === 'paused' ? 'Paused: new lines are not shown until you resume' : state === 'closed' ? 'Stopped' : 'Connecting…'} · {lines.length} lines
        </span>
      </form>
      <p class="muted">
        <code>{query}</code>
        {replica || location ? (
          <>
            {' '}
            · <a href={`#${props.path}?tab=logs`}>all of the workload's logs</a>
          </>
        ) : null}
      </p>
      <ErrorBox error={error} />
      <div class="log-lines" ref={box} tabIndex={0} role="log" aria-label={`Log lines of ${what}`} data-testid="log-lines">
        {lines.map((l) => (
          <div key={l.ts} class="log-line" data-testid="log-line">
            <span class="muted" title={timeOf(l.ts).toISOString()}>
              {clock(timeOf(l.ts))}
            </span>{' '}
            {!replica && l.labels.replica ? <span class="muted">{l.labels.replica} </span> : null}
            {l.line}
          </div>
        ))}
        {!lines.length ? <p class="muted">{state === 'connecting' ? 'Connecting…' : 'No lines yet.'}</p> : null}
      </div>
    </div>
  );
}
