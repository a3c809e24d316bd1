// The console's routes are the hash of its URL (#/org/o/gvc/g/workload/w shows GET
// /org/o/gvc/g/workload/w). The hash is followed from the moment this module loads, before anything
// renders: a hash set during the first render (a redirect) fires its hashchange before a component's
// effect could listen, and a route missed that way would leave the page blank.
import { useEffect, useState } from 'preact/hooks';

export interface Route {
  /** The hash without '#', query included: equal routes have equal raw text. */
  raw: string;
  path: string;
  segments: string[];
  query: URLSearchParams;
}

/** A console URL with its route in the path (/console/org/o/secret) is the same page as its hash form. */
function pathAsHash(): void {
  const rest = location.pathname.replace(/^\/console\/?/, '').replace(/^index\.html$/, '');
  if (rest && !location.hash) history.replaceState(history.state, '', `/console/#/${rest}${location.search}`);
}

/** A path segment as its name; a malformed escape (a mangled link) stays as typed, for the API to refuse. */
function decoded(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

function read(): Route {
  const raw = location.hash.replace(/^#/, '') || '/';
  const [path, search] = raw.split('?');
  return { raw, path, segments: path.split('/').filter(Boolean).map(decoded), query: new URLSearchParams(search ?? '') };
}

pathAsHash();
let current = read();
const listeners = new Set<(route: Route) => void>();
const publish = () => {
  const next = read();
  if (next.raw === current.raw) return;
  current = next;
  for (const listener of listeners) listener(current);
};
addEventListener('hashchange', publish);
addEventListener('popstate', publish);

/** Opens a route as a new entry of the tab's history. */
export function go(path: string): void {
  location.hash = path;
}

/** Shows another route in place of this one (a redirect): Back does not return to the route that redirected. */
export function replace(path: string): void {
  history.replaceState(history.state, '', `#${path}`);
  publish();
}

export function useRoute(): Route {
  const [route, setRoute] = useState(current);
  useEffect(() => {
    listeners.add(setRoute);
    setRoute(current);
    return () => void listeners.delete(setRoute);
  }, []);
  return route;
}
