// A list of any kind: pages followed through `next` links, filtered by name and tags through
// -query, sorted, live through -watch, and rendered as a window of rows so 10,000 items stay smooth.
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { call, callAt, explain, mayCreate, selfOf, watch, type Item, type KindInfo, type ListBody, type WatchEvent } from './api';
import { ErrorBox, Tags, ago, statusSummary } from './widgets';

const ROW = 36;
/** The first page only has to fill the screen, so rows show as soon as possible; the rest come in the largest pages the API serves. */
const FIRST_PAGE = 100;
const PAGE = 1000;

/** A `next` link asking for a page of `limit` items (the cursor does not depend on the page size). */
function withLimit(href: string, limit: number): string {
  const url = new URL(href, location.origin);
  url.searchParams.set('limit', String(limit));
  return url.pathname + url.search;
}

type SortKey = 'name' | 'lastModified' | 'status';

/** Tag filters as typed: `key` (the tag exists) or `key=value`. */
function tagTerms(tags: string): Array<{ tag: string; value?: string }> {
  return tags
    .split(/[,\s]+/)
    .filter(Boolean)
    .map((part) => {
      const [tag, ...rest] = part.split('=');
      return rest.length ? { tag, value: rest.join('=') } : { tag };
    });
}

/** The -query body of a name filter (substring) and tag filters. */
export function queryOf(kind: string, name: string, tags: string): unknown {
  const terms: unknown[] = [];
  if (name.trim()) terms.push({ property: 'name', op: '~', value: name.trim() });
  for (const t of tagTerms(tags)) terms.push(t.value === undefined ? { tag: t.tag, op: 'exists' } : { tag: t.tag, op: '=', value: t.value });
  return { kind, spec: { match: 'all', terms } };
}

/** The same filter applied to an item a watch event brings, as the server applies the query (`~` ignores case). */
function matchesFilter(item: Item, name: string, tags: string): boolean {
  if (name.trim() && !item.name.toLowerCase().includes(name.trim().toLowerCase())) return false;
  return tagTerms(tags).every((t) => (t.value === undefined ? Object.hasOwn(item.tags ?? {}, t.tag) : String(item.tags?.[t.tag]) === t.value));
}

export function ListPage(props: { kind: KindInfo; org: string; gvc?: string; collection: string }) {
  const { kind, org, gvc, collection } = props;
  const [items, setItems] = useState<Item[]>([]);
  const [loading, setLoading] = useState(true);
  const [error, setError] = useState<unknown>();
  const [name, setName] = useState('');
  const [tags, setTags] = useState('');
  const [applied, setApplied] = useState({ name: '', tags: '' });
  const [sort, setSort] = useState<{ key: SortKey; desc: boolean }>({ key: 'name', desc: false });
  const [canCreate, setCanCreate] = useState(false);
  const [live, setLive] = useState(false);

  useEffect(() => {
    if (!kind.operations.create) return;
    void mayCreate(collection, kind.kind).then(setCanCreate);
  }, [collection]);

  // The first page, then live changes from its position on (-watch), while the other pages arrive
  // through `next` links. A page adds only items no event has brought or deleted meanwhile, since
  // the event is at least as new as the page.
  useEffect(() => {
    const ctl = new AbortController();
    let stopWatch: (() => void) | undefined;
    setItems([]);
    setError(undefined);
    setLoading(true);
    setLive(false);
    const filtered = applied.name || applied.tags;
    const deleted = new Set<string>();
    const onEvent = (event: WatchEvent) => {
      setLive(true);
      const self = selfOf(event.object);
      if (!self.startsWith(`${collection}/`) && !(kind.kind === 'gvc' && self.startsWith(`/org/${org}/gvc/`))) return;
      const name = event.object.name;
      if (event.type === 'delete') deleted.add(name);
      else deleted.delete(name);
      setItems((current) => {
        const rest = current.filter((i) => i.name !== name);
        return event.type === 'delete' || !matchesFilter(event.object, applied.name, applied.tags) ? rest : [...rest, event.object];
      });
    };
    (async () => {
      const first = filtered
        ? await callAt<ListBody>('POST', `${collection}/-query?limit=${FIRST_PAGE}`, queryOf(kind.kind, applied.name, applied.tags), { signal: ctl.signal })
        : await callAt<ListBody>('GET', `${collection}?limit=${FIRST_PAGE}`, undefined, { signal: ctl.signal });
      if (ctl.signal.aborted) return;
      setItems(first.body.items);
      stopWatch = watch(org, { kind: kind.kind }, onEvent, first.seq, () => setApplied((a) => ({ ...a })));
      let page = first.body;
      for (let next = page.links.find((l) => l.rel === 'next'); next && !ctl.signal.aborted; next = page.links.find((l) => l.rel === 'next')) {
        page = await call<ListBody>('GET', withLimit(next.href, PAGE), undefined, { signal: ctl.signal });
        const arrived = page.items;
        setItems((current) => {
          const present = new Set(current.map((i) => i.name));
          return current.concat(arrived.filter((i) => !present.has(i.name) && !deleted.has(i.name)));
        });
      }
      performance.mark('keel-list-loaded');
      setLoading(false);
    })().catch((err) => {
      if (err?.name === 'AbortError') return;
      setError(err);
      setLoading(false);
    });
    return () => {
      ctl.abort();
      stopWatch?.();
    };
  }, [collection, applied]);

  const sorted = useMemo(() => {
    const key = sort.key;
    // Each item's sort key is computed once, not at every comparison (10,000 items take ~130,000).
    const keyed = items.map((item) => [key === 'status' ? statusSummary(item) : String(item[key] ?? ''), item] as const);
    keyed.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    const out = keyed.map((k) => k[1]);
    return sort.desc ? out.reverse() : out;
  }, [items, sort]);

  const header = (key: SortKey, label: string) => (
    <div role="columnheader" aria-sort={sort.key === key ? (sort.desc ? 'descending' : 'ascending') : 'none'}>
      <button type="button" class="linkish" onClick={() => setSort({ key, desc: sort.key === key ? !sort.desc : false })}>
        {label} {sort.key === key ? (sort.desc ? '▼' : '▲') : ''}
      </button>
    </div>
  );

  return (
    <section>
      <div class="title-row">
        <h1>
          {kind.kind} {gvc ? <span class="muted">in gvc {gvc}</span> : null}
        </h1>
        {canCreate ? (
          <a class="button" href={`#${collection}/-new`}>
            Create {kind.kind}
          </a>
        ) : null}
      </div>
      <p class="muted">{kind.summary}</p>
      <form
        class="filters"
        onSubmit={(e) => {
          e.preventDefault();
          setApplied({ name, tags });
        }}
      >
        <label>
          Name contains <input name="name" value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
        </label>
        <label>
          Tags (key or key=value) <input name="tags" value={tags} onInput={(e) => setTags((e.target as HTMLInputElement).value)} />
        </label>
        <button type="submit">Filter</button>
        <span class="muted" aria-live="polite" data-testid="count">
          {loading ? `Loading… ${items.length}` : `${items.length} items`}
          {live ? ' · live' : ''}
        </span>
      </form>
      <ErrorBox error={error ? explain(error) : undefined} />
      <div role="table" aria-label={`${kind.kind} items`} aria-rowcount={sorted.length + 1} class="table">
        <div role="rowgroup">
          <div role="row" class="row head">
            {header('name', 'Name')}
            <div role="columnheader">Description</div>
            <div role="columnheader">Tags</div>
            {header('status', 'Status')}
            {header('lastModified', 'Last change')}
          </div>
        </div>
        <Rows items={sorted} org={org} />
      </div>
    </section>
  );
}

/** Only the rows in view (plus a margin) are in the document; the rest is blank space of the right height. */
function Rows(props: { items: Item[]; org: string }) {
  const ref = useRef<HTMLDivElement>(null);
  const [top, setTop] = useState(0);
  const [height, setHeight] = useState(600);
  useEffect(() => {
    if (ref.current) setHeight(ref.current.clientHeight || 600);
  }, []);
  useEffect(() => {
    if (props.items.length) requestAnimationFrame(() => performance.mark('keel-list-rendered'));
  }, [props.items]);
  const first = Math.max(0, Math.floor(top / ROW) - 10);
  const last = Math.min(props.items.length, Math.ceil((top + height) / ROW) + 10);
  const shown = props.items.slice(first, last);
  return (
    <div role="rowgroup" class="rows" ref={ref} tabIndex={0} aria-label="rows" onScroll={(e) => setTop((e.target as HTMLDivElement).scrollTop)}>
      <div style={{ height: `${props.items.length * ROW}px`, position: 'relative' }}>
        {shown.map((item, i) => (
          <div role="row" aria-rowindex={first + i + 2} class="row" key={item.id ?? item.name} style={{ position: 'absolute', top: `${(first + i) * ROW}px`, left: 0, right: 0 }}>
            <div role="cell">
              <a href={`#${selfOf(item)}`}>{item.name}</a>
            </div>
            <div role="cell" class="ellipsis">
              {item.description && item.description !== item.name ? item.description : ''}
            </div>
            <div role="cell" class="ellipsis">
              <Tags tags={item.tags} />
            </div>
            <div role="cell">{statusSummary(item)}</div>
            <div role="cell" title={item.lastModified}>
              {ago(item.lastModified)}
            </div>
          </div>
        ))}
      </div>
      {!props.items.length ? <p class="muted empty">No items to show.</p> : null}
    </div>
  );
}
