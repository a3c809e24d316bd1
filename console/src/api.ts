// The console is just another client of the public API: every call carries the signed-in
// principal's key, kept in sessionStorage for this tab only, or, when the person asks the console to
// remember it on this machine, in localStorage (every tab of this origin, until Sign out).
import type { Link, Resource } from '../../src/kinds/types';

/** The storage entry of the key (the storage event tells other tabs when a remembered key goes). */
export const KEY = 'keel.key';

export class Problem extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly code: string,
    readonly body: unknown,
  ) {
    super(message);
  }
}

export type { Link };

/** A resource as the API shows it; the console reads kinds' own fields loosely. */
export interface Item extends Resource {
  status?: Record<string, any>;
  [field: string]: any;
}

export interface ListBody<T = Item> {
  kind: string;
  itemKind: string;
  items: T[];
  links: Link[];
}

export const session = {
  key: (): string | null => sessionStorage.getItem(KEY) ?? localStorage.getItem(KEY),
  remembered: (): boolean => localStorage.getItem(KEY) !== null,
  /**
   * A remembered key is kept in localStorage alone, so signing out in any tab signs every tab that
   * uses it out; a key for this tab only leaves a remembered one to the other tabs.
   */
  signIn: (key: string, remember = false) => {
    sessionStorage.removeItem(KEY);
    (remember ? localStorage : sessionStorage).setItem(KEY, key.trim());
  },
  /** Forgets the key in this tab and on this machine; other tabs that read it from localStorage lose it too. */
  signOut: () => {
    sessionStorage.clear();
    localStorage.removeItem(KEY);
  },
  /** The org a Keel service-account key names (its middle part is base64url of org.sa.keyName), or a person's token's `org` claim. */
  orgOfKey(key: string): string | undefined {
    const claims = tokenClaims(key);
    if (claims) return typeof claims.org === 'string' ? claims.org : undefined;
    return keyParts(key)?.[0];
  },
  /** Who the key or token is, as the header shows it: a person's email, or a key's service account. */
  who(key: string): string | undefined {
    const claims = tokenClaims(key);
    if (claims) return typeof claims.email === 'string' ? claims.email : undefined;
    const parts = keyParts(key);
    return parts?.[1] ? `service account ${parts[1]}` : undefined;
  },
};

function fromBase64url(text: string): string {
  return atob(text.replace(/-/g, '+').replace(/_/g, '/'));
}

/** The [org, serviceAccount, keyName] a key's middle part names. */
function keyParts(key: string): string[] | undefined {
  const middle = key.split('.')[1];
  if (!middle) return undefined;
  try {
    const parts = fromBase64url(middle).split('.');
    return parts.length === 3 ? parts : undefined;
  } catch {
    return undefined;
  }
}

/** The claims of a JWT (a token from Keel's sign-in), undefined for anything else. */
function tokenClaims(token: string): Record<string, unknown> | undefined {
  const [header, payload] = token.split('.');
  if (!header?.startsWith('eyJ') || !payload) return undefined;
  try {
    return JSON.parse(new TextDecoder().decode(Uint8Array.from(fromBase64url(payload), (c) => c.charCodeAt(0)))) as Record<string, unknown>;
  } catch {
    return undefined;
  }
}

/** Fired when the API refuses the signed-in key (revoked, expired, or another tab signed out). */
export const KEY_REFUSED = 'keel-key-refused';

export interface CallOptions {
  base?: string;
  signal?: AbortSignal;
  /** A key to try instead of the signed-in one (sign-in checks a key before keeping it). */
  key?: string;
}

/** One API call; a 4xx/5xx is thrown as a Problem carrying the API's error message. */
export async function call<T = any>(method: string, path: string, body?: unknown, options: CallOptions = {}): Promise<T> {
  return (await callAt<T>(method, path, body, options)).body;
}

/** A call and the change-stream position its answer reflects (a read's Keel-Seq header): a watch from there misses nothing. */
export async function callAt<T = any>(method: string, path: string, body?: unknown, options: CallOptions = {}): Promise<{ body: T; seq?: string }> {
  const key = options.key ?? session.key();
  const headers: Record<string, string> = { accept: 'application/json' };
  if (key) headers.authorization = `Bearer ${key}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  let res: Response;
  try {
    res = await fetch((options.base ?? '') + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal: options.signal });
  } catch (err) {
    if ((err as Error).name === 'AbortError') throw err;
    throw new Problem(0, `The server could not be reached (${(err as Error).message})`, 'unreachable', undefined);
  }
  const text = await res.text();
  let parsed: any = undefined;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    parsed = text;
  }
  if (res.status === 401 && key && key === session.key()) dispatchEvent(new CustomEvent(KEY_REFUSED));
  if (!res.ok) {
    const message = parsed && typeof parsed === 'object' && typeof parsed.message === 'string' ? parsed.message : `${res.status} ${res.statusText}`;
    throw new Problem(res.status, message, parsed?.code ?? 'error', parsed);
  }
  return { body: parsed as T, seq: res.headers.get('keel-seq') ?? undefined };
}

/** A message a person can act on, for any error a call threw. */
export function explain(err: unknown): string {
  if (err instanceof Problem) {
    if (err.status === 403) return `You do not have permission for this (403 forbidden): ${err.message}`;
    if (err.status === 401) return `Your key was not accepted (401): ${err.message}. Sign out and sign in with a valid key.`;
    if (err.status === 404) return `Not found (404): ${err.message}`;
    if (err.status === 409) return `Conflict (409): ${err.message}`;
    return err.status ? `${err.message} (${err.status} ${err.code})` : err.message;
  }
  return String((err as Error)?.message ?? err);
}

let auditBase: Promise<string> | undefined;

/** The Audit API's base URL, from /discovery (it listens on its own port). */
export function auditApi(): Promise<string> {
  auditBase ??= call<{ endpoints: { audit: string } }>('GET', '/discovery').then((d) => d.endpoints.audit.replace(/\/$/, ''));
  return auditBase;
}

export function selfOf(item: { links?: Link[] }): string {
  return item.links?.find((l) => l.rel === 'self')?.href ?? '';
}

export interface WatchEvent {
  type: string;
  seq: number;
  kind: string;
  object: Item;
}

/**
 * Follows GET /org/{org}/-watch (server-sent events) with fetch, since EventSource cannot send an
 * Authorization header; reconnects after a drop, resuming after the last event seen. `since` is the
 * Keel-Seq of the read the caller shows, so no change between that read and the watch is missed;
 * when the server no longer holds history that old (410), `onGone` is told to read again and the
 * watch goes on from the present.
 */
export function watch(org: string, params: Record<string, string>, onEvent: (event: WatchEvent) => void, since?: string, onGone?: () => void): () => void {
  const stop = new AbortController();
  let last: string | undefined = since;
  const run = async () => {
    for (let attempt = 0; !stop.signal.aborted; attempt++) {
      try {
        const query = new URLSearchParams(params);
        const headers: Record<string, string> = { accept: 'text/event-stream', authorization: `Bearer ${session.key() ?? ''}` };
        if (last !== undefined) headers['last-event-id'] = last;
        const res = await fetch(`/org/${encodeURIComponent(org)}/-watch?${query}`, { headers, signal: stop.signal });
        if (res.status === 401 || res.status === 403 || res.status === 400) return;
        if (res.status === 410) {
          last = undefined;
          onGone?.();
          continue;
        }
        if (!res.ok || !res.body) throw new Error(`watch answered ${res.status}`);
        attempt = 0;
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += value;
          let end: number;
          while ((end = buffer.indexOf('\n\n')) >= 0) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            let data = '';
            let id: string | undefined;
            let name = 'message';
            for (const line of block.split('\n')) {
              if (line.startsWith('data:')) data += line.slice(5).trimStart();
              else if (line.startsWith('id:')) id = line.slice(3).trim();
              else if (line.startsWith('event:')) name = line.slice(6).trim();
            }
            if (id !== undefined) last = id;
            if (!data || name === 'bookmark') continue;
            try {
              onEvent(JSON.parse(data) as WatchEvent);
            } catch {
              // a malformed event is skipped; the next one still arrives
            }
          }
        }
      } catch (err) {
        if (stop.signal.aborted) return;
      }
      await new Promise((r) => setTimeout(r, Math.min(10_000, 500 * 2 ** attempt)));
    }
  };
  void run();
  return () => stop.abort();
}

export interface KindInfo {
  kind: string;
  scope: 'org' | 'gvc';
  summary: string;
  operations: { create: boolean; update: boolean; delete: boolean };
}

let kindList: Promise<KindInfo[]> | undefined;

/** The kind registry (GET /-kinds): navigation follows it, so a new kind needs no console code. */
export function kinds(): Promise<KindInfo[]> {
  kindList ??= call<ListBody<KindInfo>>('GET', '/-kinds').then((b) => b.items);
  return kindList;
}

/**
 * The permissions Keel reports the caller holds (implied ones included) on an item, or on every item
 * of a collection (GET …/-granted): read with a request that succeeds for anyone who may read the
 * item, so deciding which controls to show sends nothing that fails.
 */
export async function granted(path: string): Promise<string[]> {
  try {
    return (await call<{ granted: string[] }>('GET', `${path}/-granted`)).granted;
  } catch {
    return [];
  }
}

/** Whether the caller may change an item. */
export const mayEdit = async (path: string) => (await granted(path)).includes('edit');

/** Whether the caller may hold a permission on an item, such as exec.runCronWorkload (which exec and manage imply). */
export const mayDo = async (path: string, permission: string) => (await granted(path)).includes(permission);

/** Whether the caller may create items in a collection: a permission on all of its kind (users are created with `invite`). */
export async function mayCreate(collection: string, kind: string): Promise<boolean> {
  return (await granted(collection)).includes(kind === 'user' ? 'invite' : 'create');
}

/** The subprotocol prefix that carries the key on a WebSocket (a browser's WebSocket sends no Authorization header). */
const TOKEN_PROTOCOL = 'base64url.bearer.authorization.keel.';

function base64url(text: string): string {
  return btoa(String.fromCharCode(...new TextEncoder().encode(text)))
    .replace(/\+/g, '-')
    .replace(/\//g, '_')
    .replace(/=+$/, '');
}

/** A WebSocket URL on this server (http becomes ws) for an absolute URL or a path. */
export function socketUrl(url: string): string {
  const u = new URL(url, location.origin);
  u.protocol = u.protocol === 'https:' ? 'wss:' : 'ws:';
  return u.toString();
}

let logsBase: Promise<string> | undefined;

/** The logs API's base URL, from /discovery. */
export function logsApi(): Promise<string> {
  logsBase ??= call<{ endpoints: { logs: string } }>('GET', '/discovery').then((d) => d.endpoints.logs.replace(/\/$/, ''));
  return logsBase;
}

export interface LogLine {
  ts: string;
  labels: Record<string, string>;
  line: string;
}

/**
 * Opens a tail of the logs API (`…/loki/api/v1/tail`) with the signed-in key: first the newest
 * `limit` lines since `start` (Unix ns), then each new matching line. Returns the socket's close.
 */
export async function tail(org: string, query: string, start: string, limit: number, on: { lines: (lines: LogLine[]) => void; closed: (why: string, reopen: boolean) => void }): Promise<() => void> {
  const params = new URLSearchParams({ query, start, limit: String(limit) });
  const url = socketUrl(`${await logsApi()}/logs/org/${encodeURIComponent(org)}/loki/api/v1/tail?${params}`);
  const ws = new WebSocket(url, ['keel', `${TOKEN_PROTOCOL}${base64url(session.key() ?? '')}`]);
  let opened = false;
  let closedByUs = false;
  ws.onopen = () => (opened = true);
  ws.onmessage = (event) => {
    try {
      const body = JSON.parse(String(event.data)) as { streams: Array<{ stream: Record<string, string>; values: Array<[string, string]> }> };
      const lines: LogLine[] = [];
      for (const s of body.streams) for (const [ts, line] of s.values) lines.push({ ts, labels: s.stream, line });
      lines.sort((a, b) => (BigInt(a.ts) < BigInt(b.ts) ? -1 : BigInt(a.ts) > BigInt(b.ts) ? 1 : 0));
      on.lines(lines);
    } catch {
      // a message that is not lines is not shown
    }
  };
  ws.onclose = (event) => {
    if (closedByUs) return;
    // A refused upgrade (no readLogs, a bad query) closes before opening, without a reason the page can read;
    // an open tail that drops (a restart, a slow consumer) may be opened again, unless access was revoked (1008).
    if (!opened) on.closed('the logs API refused the tail: the key may lack readLogs on the org, or the search is not valid LogQL', false);
    else on.closed(event.reason || `the server closed the tail (${event.code})`, event.code !== 1008);
  };
  return () => {
    closedByUs = true;
    ws.close();
  };
}
