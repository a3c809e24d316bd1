// The Keel console: a hash-routed single-page app. A route's path is the API path of what it shows
// (#/org/o/gvc/g/workload/w shows GET /org/o/gvc/g/workload/w), so every kind works the same way.
import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { browsable, call, kinds, session, type KindInfo, type ListBody } from './api';
import { AuditTrail } from './audit';
import { ItemPage, NewItem } from './item';
import { ListPage } from './list';
import { ErrorBox, go, useLoad } from './widgets';
import './style.css';

export interface Route {
  path: string;
  segments: string[];
  query: URLSearchParams;
}

function currentRoute(): Route {
  const raw = location.hash.replace(/^#/, '') || '/';
  const [path, search] = raw.split('?');
  return { path, segments: path.split('/').filter(Boolean).map(decodeURIComponent), query: new URLSearchParams(search ?? '') };
}

function useRoute(): Route {
  const [route, setRoute] = useState(currentRoute);
  useEffect(() => {
    const on = () => setRoute(currentRoute());
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  return route;
}

function SignIn(props: { onSignedIn: () => void }) {
  const [key, setKey] = useState('');
  const [error, setError] = useState<string>();
  const submit = async (e: Event) => {
    e.preventDefault();
    session.signIn(key);
    const org = session.orgOfKey(key.trim());
    try {
      // A key is good when it can read something: its org, or the list of orgs it belongs to.
      if (org) await call('GET', `/org/${encodeURIComponent(org)}/gvc?limit=1`);
      else await call('GET', '/org');
      props.onSignedIn();
      go(org ? `/org/${org}` : '/');
    } catch (err) {
      session.signOut();
      setError((err as Error).message);
    }
  };
  return (
    <main class="signin">
      <h1>Keel console</h1>
      <form onSubmit={submit}>
        <label for="key">Service-account key</label>
        <textarea id="key" name="key" rows={3} value={key} onInput={(e) => setKey((e.target as HTMLTextAreaElement).value)} autocomplete="off" spellcheck={false} />
        <p class="muted">The key stays in this tab only (session storage) and is sent to this Keel server alone. The first org's superuser key is in the data directory's admin.token.</p>
        <button type="submit" disabled={!key.trim()}>
          Sign in
        </button>
        <ErrorBox error={error} />
      </form>
    </main>
  );
}

function OrgHome(props: { org: string; kinds: KindInfo[] }) {
  return (
    <section>
      <h1>Org {props.org}</h1>
      <p>Pick a kind on the left, or open the <a href={`#/org/${props.org}/-audit`}>audit trail</a>.</p>
      <ul class="cards">
        {props.kinds
          .filter((k) => k.scope === 'org')
          .map((k) => (
            <li key={k.kind}>
              <a href={`#/org/${props.org}/${k.kind}`}>{k.kind}</a>
              <div class="muted">{k.summary}</div>
            </li>
          ))}
      </ul>
    </section>
  );
}

function Shell(props: { route: Route; onSignOut: () => void }) {
  const { segments } = props.route;
  const keyOrg = session.orgOfKey(session.key() ?? '');
  const org = segments[0] === 'org' && segments[1] ? segments[1] : keyOrg;
  const gvcFromPath = segments[2] === 'gvc' && segments[3] ? segments[3] : undefined;
  // The GVC is remembered per org, so switching orgs never offers another org's GVC.
  const [picked, setPicked] = useState<Record<string, string | undefined>>({});
  const pathGvc = gvcFromPath && gvcFromPath !== '-new' ? gvcFromPath : undefined;
  const gvc = pathGvc ?? (org ? (org in picked ? picked[org] : (sessionStorage.getItem(`keel.gvc.${org}`) ?? undefined)) : undefined);
  useEffect(() => {
    if (pathGvc && org) sessionStorage.setItem(`keel.gvc.${org}`, pathGvc);
  }, [pathGvc, org]);
  const registry = useLoad(() => kinds(), []);
  const orgs = useLoad(() => call<ListBody>('GET', '/org').then((b) => b.items.map((o) => o.name)), []);
  const gvcs = useLoad(() => (org ? call<ListBody>('GET', `/org/${org}/gvc?limit=1000`).then((b) => b.items.map((g) => g.name)) : Promise.resolve([])), [org]);
  const shown = browsable(registry.data ?? []);
  const orgKinds = shown.filter((k) => k.scope === 'org');
  const gvcKinds = shown.filter((k) => k.scope === 'gvc');
  const insideGvc = segments[2] === 'gvc' && segments.length >= 5;
  // The current GVC is offered even when it was created after the list was read.
  const gvcChoices = Array.from(new Set([...(gvcs.data ?? []), ...(gvc ? [gvc] : [])])).sort();
  const orgChoices = Array.from(new Set([...(orgs.data ?? []), ...(org ? [org] : [])])).sort();

  if (segments[0] !== 'org' && org) {
    go(`/org/${org}`);
    return null;
  }

  let body;
  if (!org) body = <p>No org: sign in with a key of an org.</p>;
  else if (segments.length <= 2) body = <OrgHome org={org} kinds={shown} />;
  else if (segments[2] === '-audit') body = <AuditTrail org={org} query={props.route.query} />;
  else body = <Resource route={props.route} org={org} kinds={registry.data ?? []} />;

  return (
    <div class="shell">
      <header class="top">
        <a class="brand" href={org ? `#/org/${org}` : '#/'}>
          Keel
        </a>
        <label>
          Org{' '}
          <select
            aria-label="Org"
            value={org}
            onChange={(e) => {
              // Stay on the same org-level kind (a GVC's page goes to the other org's GVCs); a page inside a GVC has no counterpart there.
              const next = (e.target as HTMLSelectElement).value;
              const kind = insideGvc ? undefined : segments[2];
              go(kind ? `/org/${next}/${kind}` : `/org/${next}`);
            }}
          >
            {orgChoices.map((o) => (
              <option key={o} selected={o === org}>
                {o}
              </option>
            ))}
          </select>
        </label>
        <label>
          GVC{' '}
          <select
            aria-label="GVC"
            value={gvc ?? ''}
            onChange={(e) => {
              const next = (e.target as HTMLSelectElement).value;
              if (org) setPicked((p) => ({ ...p, [org]: next || undefined }));
              if (next) {
                sessionStorage.setItem(`keel.gvc.${org}`, next);
                go(`/org/${org}/gvc/${next}/${segments[2] === 'gvc' && segments[4] ? segments[4] : 'workload'}`);
              }
            }}
          >
            <option value="">(none)</option>
            {gvcChoices.map((g) => (
              <option key={g} selected={g === gvc}>
                {g}
              </option>
            ))}
          </select>
        </label>
        <span class="spacer" />
        <button type="button" onClick={props.onSignOut}>
          Sign out
        </button>
      </header>
      <nav class="side" aria-label="Kinds">
        <h2>Org</h2>
        <ul>
          {orgKinds.map((k) => (
            <li key={k.kind}>
              <a href={`#/org/${org}/${k.kind}`} aria-current={segments[2] === k.kind && !insideGvc ? 'page' : undefined} title={k.summary}>
                {k.kind}
              </a>
            </li>
          ))}
          <li>
            <a href={`#/org/${org}/-audit`} aria-current={segments[2] === '-audit' ? 'page' : undefined}>
              audit trail
            </a>
          </li>
        </ul>
        <h2>GVC {gvc ?? ''}</h2>
        {gvc ? (
          <ul>
            {gvcKinds.map((k) => (
              <li key={k.kind}>
                <a href={`#/org/${org}/gvc/${gvc}/${k.kind}`} aria-current={segments[4] === k.kind ? 'page' : undefined} title={k.summary}>
                  {k.kind}
                </a>
              </li>
            ))}
          </ul>
        ) : (
          <p class="muted">Pick a GVC to see its workloads, identities and volume sets.</p>
        )}
      </nav>
      <main class="content">
        <ErrorBox error={registry.error ? String(registry.error) : undefined} />
        {body}
      </main>
    </div>
  );
}

/** Decides from the path whether it names a list, an item or a new item, for any kind. */
function Resource(props: { route: Route; org: string; kinds: KindInfo[] }) {
  const s = props.route.segments;
  const org = props.org;
  // /org/o/gvc/g/<kind>[/name]  or  /org/o/<kind>[/name]
  const inGvc = s[2] === 'gvc' && s.length >= 5;
  const kind = inGvc ? s[4] : s[2];
  const name = inGvc ? s[5] : s[3];
  const gvc = inGvc ? s[3] : undefined;
  const info = props.kinds.find((k) => k.kind === kind);
  if (!props.kinds.length) return <p>Loading…</p>;
  if (!info) return <ErrorBox error={`Unknown kind '${kind}'.`} />;
  const collection = gvc ? `/org/${org}/gvc/${gvc}/${kind}` : `/org/${org}/${kind}`;
  const tab = props.route.query.get('tab') ?? 'overview';
  if (name === '-new') return <NewItem kind={info} org={org} gvc={gvc} collection={collection} />;
  if (name) return <ItemPage key={`${collection}/${name}`} kind={info} org={org} gvc={gvc} path={kind === 'gvc' ? `/org/${org}/gvc/${name}` : `${collection}/${name}`} tab={tab} query={props.route.query} />;
  return <ListPage key={collection} kind={info} org={org} gvc={gvc} collection={collection} />;
}

function App() {
  const route = useRoute();
  const [signedIn, setSignedIn] = useState(() => Boolean(session.key()));
  if (!signedIn || route.path === '/signin') return <SignIn onSignedIn={() => setSignedIn(true)} />;
  return (
    <Shell
      route={route}
      onSignOut={() => {
        session.signOut();
        setSignedIn(false);
        go('/signin');
      }}
    />
  );
}

render(<App />, document.getElementById('app')!);
