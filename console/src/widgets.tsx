// Small wrappers shared by the screens; the editor chunk is imported on first use.
import { useEffect, useRef, useState } from 'preact/hooks';
import type { ComponentChildren } from 'preact';
import type { EditorHandle } from './editor';

const editorModule = () => import('./editor');

export function CodeEditor(props: { text: string; readOnly: boolean; label: string; onChange?: (text: string) => void; handle?: (h: EditorHandle) => void }) {
  const ref = useRef<HTMLDivElement>(null);
  useEffect(() => {
    let handle: EditorHandle | undefined;
    let gone = false;
    void editorModule().then((m) => {
      if (gone || !ref.current) return;
      handle = m.mountEditor(ref.current, props.text, { readOnly: props.readOnly, label: props.label, onChange: props.onChange });
      props.handle?.(handle);
    });
    return () => {
      gone = true;
      handle?.destroy();
    };
  }, [props.text, props.readOnly]);
  return <div class="editor" ref={ref} data-testid="editor" />;
}

export function Diff(props: { before: string; after: string; labels: [string, string] }) {
  const ref = useRef<HTMLDivElement>(null);
  useEffect(() => {
    let destroy: (() => void) | undefined;
    let gone = false;
    void editorModule().then((m) => {
      if (!gone && ref.current) destroy = m.mountDiff(ref.current, props.before, props.after, props.labels);
    });
    return () => {
      gone = true;
      destroy?.();
    };
  }, [props.before, props.after]);
  return (
    <div class="diff" data-testid="diff">
      <div class="diff-labels">
        <span>{props.labels[0]}</span>
        <span>{props.labels[1]}</span>
      </div>
      {props.before === props.after ? <p class="muted">No differences.</p> : null}
      <div ref={ref} />
    </div>
  );
}

export function ErrorBox(props: { error: unknown; children?: ComponentChildren }) {
  if (!props.error) return null;
  return (
    <div class="error" role="alert">
      {typeof props.error === 'string' ? props.error : String(props.error)}
      {props.children}
    </div>
  );
}

/** Runs an async loader and keeps its result, error and a reload function. */
export function useLoad<T>(
  load: (signal: AbortSignal) => Promise<T>,
  deps: unknown[],
): { data: T | undefined; error: unknown; reload: () => void; setData: (d: T | ((current: T | undefined) => T | undefined)) => void } {
  const [data, setData] = useState<T | undefined>(undefined);
  const [error, setError] = useState<unknown>(undefined);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    const ctl = new AbortController();
    setError(undefined);
    load(ctl.signal).then(
      (d) => !ctl.signal.aborted && setData(d),
      (e) => !ctl.signal.aborted && e?.name !== 'AbortError' && setError(e),
    );
    return () => ctl.abort();
  }, [...deps, tick]);
  return { data, error, reload: () => setTick((t) => t + 1), setData };
}

export function Tags(props: { tags: Record<string, unknown> }) {
  const entries = Object.entries(props.tags ?? {});
  if (!entries.length) return <span class="muted">—</span>;
  return (
    <span class="tags">
      {entries.slice(0, 6).map(([k, v]) => (
        <span class="tag" key={k}>
          {v === '' || v === null || v === undefined ? k : `${k}=${String(v)}`}
        </span>
      ))}
      {entries.length > 6 ? <span class="muted">+{entries.length - 6}</span> : null}
    </span>
  );
}

export function ago(iso: string | undefined): string {
  if (!iso) return '';
  const s = Math.round((Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return `${Math.max(0, s)}s ago`;
  if (s < 3600) return `${Math.round(s / 60)}m ago`;
  if (s < 86400) return `${Math.round(s / 3600)}h ago`;
  return `${Math.round(s / 86400)}d ago`;
}

/** A one-word summary of an item's status, whatever its kind. */
export function statusSummary(item: { status?: Record<string, any> }): string {
  const s = item.status;
  if (!s || typeof s !== 'object' || !Object.keys(s).length) return '—';
  if (typeof s.ready === 'boolean') return s.ready ? 'Ready' : s.message || 'Not ready';
  for (const key of ['phase', 'lifecycle', 'state', 'status', 'message']) if (typeof s[key] === 'string') return s[key];
  return 'Has status';
}

/** A data table with column headers; its rows are the children. */
export function Grid(props: { label: string; columns: string[]; children: ComponentChildren }) {
  return (
    <table class="grid" aria-label={props.label}>
      <thead>
        <tr>
          {props.columns.map((c) => (
            <th scope="col" key={c}>
              {c}
            </th>
          ))}
        </tr>
      </thead>
      <tbody>{props.children}</tbody>
    </table>
  );
}
