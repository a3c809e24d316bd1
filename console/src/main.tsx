// The Keel console: a hash-routed single-page app. A route's path is the API path of what it shows
// (#/org/o/gvc/g/workload/w shows GET /org/o/gvc/g/workload/w), so every kind works the same way.
import { render } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { call, KEY, KEY_REFUSED, kinds, session, type KindInfo, type ListBody } from './api';
import { AuditTrail } from './audit';
import { ItemPage, NewItem } from './item';
import { ListPage } from './list';
import { menuOf, type MenuGroup } from './menu';
import { go, replace, useRoute, type Route } from './route';
import { ErrorBox, useLoad } from './widgets';
import { finishPersonSignIn, startPersonSignIn } from './person';
import './style.css';

/** A route that names a page of an org: kept through sign-in, so a link opened while signed out lands there. */
const isDeepLink = (route: Route) => route.segments[0] === 'org' && Boolean(route.segments[1]);

function SignIn(props: { route: Route; notice?: string; onSignedIn: () => void }) {
  const [key, setKey] = useState('');
  const [remember, setRemember] = useState(false);
  const [error, setError] = useState<string>();
  const submit = async (e: Event) => {
    e.preventDefault();
    const candidate = key.trim();
    const org = session.orgOfKey(candidate);
    try {
      // A key is good when it can read something: its org, or the list of orgs it belongs to.
      if (org) await call('GET', `/org/${encodeURIComponent(org)}/gvc?limit=1`, undefined, { key: candidate });
      else await call('GET', '/org', undefined, { key: candidate });
      session.signIn(candidate, remember);
      props.onSignedIn();
      if (!isDeepLink(props.route)) replace(org ? `/org/${org}` : '/');
    } catch (err) {
      setError((err as Error).message);
    }
  };
  return (
    <main class="signin">
      <h1>Keel console</h1>
      {props.notice ? (
        <p class="warning" role="status">
          {props.notice}
        </p>
      ) : null}
      {isDeepLink(props.route) ? <p data-testid="after-signin">Sign in to open {props.route.path}.</p> : null}
      <p>
        <button type="button" class="person" onClick={() => startPersonSignIn(isDeepLink(props.route) ? props.route.path : '/').catch((err: Error) => setError(err.message))}>
          Sign in with your account
        </button>{' '}
        <span class="muted">(an invited email, through this Keel's sign-in page), or with a key:</span>
      </p>
      <form onSubmit={submit}>
        <label for="key">Service-account key</label>
        <textarea id="key" name="key" rows={3} value={key} onInput={(e) => setKey((e.target as HTMLTextAreaElement).value)} autocomplete="off" spellcheck={false} />
        <div class="check">
          <input id="remember" type="checkbox" checked={remember} onChange={(e) => setRemember((e.target as HTMLInputElement).checked)} />
          <label for="remember">Remember this key on this machine</label>
        </div>
        <p class="muted">
          Without it, the key stays in this tab only (session storage); remembered, it is kept in this browser's local storage for every tab until you sign out, so
          use it only on a machine of your own. It is sent to this Keel server alone. The first org's superuser key is in the data directory's admin.token.
        </p>
        <button type="submit" disabled={!key.trim()}>
          Sign in
        </button>
        <ErrorBox error={error} />
      </form>
    </main>
  );
}

function OrgHome(props: { org: string; menu: MenuGroup[] }) {
  return (
    <section>
      <h1>Org {props.org}</h1>
      <p>
        Pick a kind on the left, or open the <a href={`#/org/${props.org}/-audit`}>audit trail</a>.
      </p>
      {props.menu.map((group) => (
        <div key={group.title}>
          <h2>{group.title}</h2>
          <ul class="cards">
            {group.org.map((k) => (
              <li key={k.kind}>
                <a href={`#/org/${props.org}/${k.kind}`}>{k.kind}</a>
                <div class="muted">{k.summary}</div>
              </li>
            ))}
          </ul>
        </div>
      ))}
    </section>
  );
}

function Shell(props: { route: Route; onSignOut: () => void }) {
  const { segments } = props.route;
  const registry = useLoad(() => kinds(), []);
  const orgs = useLoad(() => call<ListBody>('GET', '/org').then((b) => b.items.map((o) => o.name)), []);
  const inOrg = segments[0] === 'org' && Boolean(segments[1]);
  // A key names its org; a principal whose key does not (a token) starts at the first org it belongs to.
  const org = inOrg ? segments[1] : (session.orgOfKey(session.key() ?? '') ?? orgs.data?.[0]);
  // Any other route (the console's bare URL, a stale bookmark) shows the org's home in its place.
  useEffect(() => {
    if (!inOrg && org) replace(`/org/${org}`);
  }, [inOrg, org]);
  const gvcFromPath = segments[2] === 'gvc' && segments[3] ? segments[3] : undefined;
  // The GVC is remembered per org, so switching orgs never offers another org's GVC.
  const [picked, setPicked] = useState<Record<string, string | undefined>>({});
  const pathGvc = gvcFromPath && gvcFromPath !== '-new' ? gvcFromPath : undefined;
  const gvc = pathGvc ?? (org ? (org in picked ? picked[org] : (sessionStorage.getItem(`keel.gvc.${org}`) ?? undefined)) : undefined);
  useEffect(() => {
    if (pathGvc && org) sessionStorage.setItem(`keel.gvc.${org}`, pathGvc);
  }, [pathGvc, org]);
  const gvcs = useLoad(() => (org ? call<ListBody>('GET', `/org/${org}/gvc?limit=1000`).then((b) => b.items.map((g) => g.name)) : Promise.resolve([])), [org]);
  const menu = menuOf(registry.data ?? []);
  const insideGvc = segments[2] === 'gvc' && segments.length >= 5;
  // The current GVC is offered even when it was created after the list was read.
  const gvcChoices = Array.from(new Set([...(gvcs.data ?? []), ...(gvc ? [gvc] : [])])).sort();
  const orgChoices = Array.from(new Set([...(orgs.data ?? []), ...(org ? [org] : [])])).sort();

  let body;
  if (!org) body = orgs.data || orgs.error ? <p>No org: sign in with a key of an org.</p> : <p>Loading…</p>;
  else if (!inOrg || segments.length <= 2) body = <OrgHome org={org} menu={menu} />;
  else if (segments[2] === '-audit') body = <AuditTrail org={org} query={props.route.query} kinds={registry.data ?? []} />;
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
        <span class="who" data-testid="who">
          {session.who(session.key() ?? '') ?? ''}
        </span>
        <button type="button" onClick={props.onSignOut}>
          Sign out
        </button>
      </header>
      <nav class="side" aria-label="Kinds">
        {menu.map((group) => (
          <div key={group.title} role="group" aria-labelledby={`menu-${group.title}`}>
            <h2 id={`menu-${group.title}`}>{group.title}</h2>
            <ul>
              {group.org.map((k) => (
                <li key={k.kind}>
                  <a href={`#/org/${org}/${k.kind}`} aria-current={segments[2] === k.kind && !insideGvc ? 'page' : undefined} title={k.summary}>
                    {k.kind}
                  </a>
                </li>
              ))}
              {group.gvc.length ? (
                <li>
                  <span class="muted">{gvc ? `in GVC ${gvc}` : 'in a GVC'}</span>
                  {gvc ? (
                    <ul class="nested">
                      {group.gvc.map((k) => (
                        <li key={k.kind}>
                          <a href={`#/org/${org}/gvc/${gvc}/${k.kind}`} aria-current={segments[4] === k.kind ? 'page' : undefined} title={k.summary}>
                            {k.kind}
                          </a>
                        </li>
                      ))}
                    </ul>
                  ) : (
                    <p class="muted">Pick a GVC to see its {group.gvc.map((k) => k.kind).join(', ')}.</p>
                  )}
                </li>
              ) : null}
              {group.pages.map((page) => (
                <li key={page.path}>
                  <a href={`#/org/${org}/${page.path}`} aria-current={segments[2] === page.path ? 'page' : undefined}>
                    {page.label}
                  </a>
                </li>
              ))}
            </ul>
          </div>
        ))}
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
  const [notice, setNotice] = useState<string>();
  // Coming back from Keel's sign-in page with a code: trade it for the person's token.
  useEffect(() => {
    finishPersonSignIn().then(
      (done) => {
        if (!done) return;
        session.signIn(done.token);
        setNotice(undefined);
        setSignedIn(true);
        const org = session.orgOfKey(done.token);
        replace(done.after !== '/' ? done.after : org ? `/org/${org}` : '/');
      },
      (err: Error) => setNotice(err.message),
    );
  }, []);
  const signedInNow = useRef(signedIn);
  signedInNow.current = signedIn;
  useEffect(() => {
    // The server refused the key (revoked or expired): sign in again, on the same page.
    const refused = () => {
      if (!signedInNow.current) return;
      session.signOut();
      setNotice('The server no longer accepts your key (401). Sign in again to go on.');
      setSignedIn(false);
    };
    // Another tab signed out of a remembered key.
    const forgotten = (e: StorageEvent) => {
      if ((e.key === KEY || e.key === null) && !session.key()) setSignedIn(false);
    };
    addEventListener(KEY_REFUSED, refused);
    addEventListener('storage', forgotten);
    return () => {
      removeEventListener(KEY_REFUSED, refused);
      removeEventListener('storage', forgotten);
    };
  }, []);
  if (!signedIn || route.path === '/signin')
    return (
      <SignIn
        route={route}
        notice={notice}
        onSignedIn={() => {
          setNotice(undefined);
          setSignedIn(true);
        }}
      />
    );
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
