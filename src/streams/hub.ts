import { changes, type AppendedEvent } from '../audit/changes.js';
import type { Authorizer } from '../auth/authorizer.js';
import { parseKey } from '../auth/keys.js';
import { isReplicaToken, replicaTokenHash } from '../auth/replica-tokens.js';
import { identity, type Principal } from '../auth/principal.js';
import { ApiError } from '../errors.js';
import type { Store } from '../store/types.js';
import { ACCESS_KINDS } from '../store/access-kinds.js';
import { OrgFeed, type FeedHooks } from './feed.js';
import { HeldBytes } from './held.js';
import { Watcher, type WatcherOptions } from './watcher.js';
import type { Scheduler } from '../server/fairness.js';

/** How often every open stream's credentials and membership are checked again (revocations made through another org or process). */
const RECHECK_MS = 1000;
/** Seconds a refused watch is told to wait (Retry-After), and the back-off of a caller that does not. */
const RETRY_AFTER_S = 1;

export interface HubLimits {
  streamsPerPrincipal: number;
  replaysPerPrincipal: number;
  bookmarkMs: number;
  bufferBytes: number;
  /** How long a client may stay more than bufferBytes behind before its stream is cut. */
  behindMs: number;
  /** Bytes all streams together may hold for their clients. */
  bufferTotalBytes: number;
}

interface Held {
  watcher: Watcher;
  /** The key (`key NAME`) or replica token (`replica HASH`) the stream was opened with (undefined for a JWT user). */
  credential?: string;
  /** What decides whether it may go on watching (see mayWatch): streams with the same one share the answer. */
  question: string;
}

/**
 * Every watch stream of this process: one feed per watched org, the streams and replays each
 * principal holds, and revocation. A stream ends when its key is revoked, its service account is
 * deleted, or it is no longer a member of the org: at once after a change made in this process,
 * and within about a second after one made by another process.
 */
export class WatchHub {
  private readonly feeds = new Map<string, OrgFeed>();
  private readonly held = new Map<Watcher, Held>();
  private readonly streams = new Map<string, number>();
  private readonly replays = new Map<string, number>();
  private readonly bookmarks: NodeJS.Timeout;
  private readonly recheck: NodeJS.Timeout;
  /** Watchers to be checked again (see checkDirty). */
  private readonly dirty = new Set<Watcher>();
  private checking = false;
  /** When each recently refused principal may ask again (see admitAfterBackoff). */
  private readonly refusedUntil = new Map<string, number>();
  /** Refusals held until their principal's back-off ends, per principal, and their timers. */
  private readonly waiting = new Map<string, number>();
  private readonly held429 = new Map<() => void, NodeJS.Timeout>();
  /** What every stream holds for its client, against bufferTotalBytes. */
  private readonly heldBytes: HeldBytes;

  /** This process's writes in any org: a principal's own org may not be one that is watched. */
  private readonly onChange = (org: string, appended?: AppendedEvent) => {
    const resource = appended?.resource;
    if (resource && ACCESS_KINDS.has(resource.kind)) this.accessChanged(org, [{ kind: resource.kind, name: resource.name, action: appended.event.actionType }]);
  };

  private readonly hooks: FeedHooks = {
    onError: (err) => this.onError(err),
    onAccess: (org, events) => this.accessChanged(org, events),
  };

  constructor(
    private readonly store: Store,
    private readonly auth: Authorizer,
    private readonly limits: HubLimits,
    private readonly onError: (err: unknown) => void,
    /** Each chunk of a replay (its read from the store and its sending) waits its fair turn among long reads. */
    private readonly scheduler: Scheduler,
  ) {
    this.heldBytes = new HeldBytes(limits.bufferTotalBytes);
    changes.on('change', this.onChange);
    this.bookmarks = setInterval(() => {
      for (const { watcher } of this.held.values()) watcher.bookmark();
    }, limits.bookmarkMs);
    this.bookmarks.unref();
    this.recheck = setInterval(() => {
      this.markDirty(() => true, false);
      const now = Date.now();
      for (const [link, until] of this.refusedUntil) if (until <= now) this.refusedUntil.delete(link);
    }, RECHECK_MS);
    this.recheck.unref();
  }

  /** Refuses a new stream over the principal's cap (429 with Retry-After). */
  admit(principal: Principal): void {
    if ((this.streams.get(principal.link) ?? 0) >= this.limits.streamsPerPrincipal) {
      throw this.refusal('stream', principal, `${principal.link} already holds ${this.limits.streamsPerPrincipal} open watch streams on this server; close one first`, this.limits.streamsPerPrincipal);
    }
  }

  /** Refuses a replay of stored history over the principal's cap (429 with Retry-After). */
  admitReplay(principal: Principal): void {
    if ((this.replays.get(principal.link) ?? 0) >= this.limits.replaysPerPrincipal) {
      throw this.refusal('replay', principal, `${principal.link} already replays history in ${this.limits.replaysPerPrincipal} watch streams; wait for one to catch up`, this.limits.replaysPerPrincipal);
    }
  }

  /**
   * admit() or admitReplay() after the principal's back-off: a principal refused less than
   * Retry-After ago that asks again (it ignored the header) is held until then, and only then
   * admitted or refused again. A client reopening in a tight loop thus costs one cheap refusal per
   * connection per Retry-After, not thousands a second; a client that waits as told never waits here.
   */
  async admitAfterBackoff(principal: Principal, what: 'stream' | 'replay'): Promise<void> {
    const until = this.refusedUntil.get(`${what}\n${principal.link}`);
    const wait = until === undefined ? 0 : until - Date.now();
    if (wait > 0) {
      const waiting = this.waiting.get(principal.link) ?? 0;
      // Held refusals are bounded too: beyond them the principal is answered at once.
      if (waiting < this.limits.streamsPerPrincipal) {
        count(this.waiting, principal.link, 1);
        try {
          await new Promise<void>((resolve) => {
            const timer = setTimeout(() => {
              this.held429.delete(resolve);
              resolve();
            }, wait);
            this.held429.set(resolve, timer);
          });
        } finally {
          count(this.waiting, principal.link, -1);
        }
      }
    }
    if (what === 'stream') this.admit(principal);
    else this.admitReplay(principal);
  }

  /** A 429 for the principal, which starts (or extends) its back-off from `what`. */
  private refusal(what: 'stream' | 'replay', principal: Principal, message: string, limit: number): ApiError {
    this.refusedUntil.set(`${what}\n${principal.link}`, Date.now() + RETRY_AFTER_S * 1000);
    return new ApiError('rate_limited', message, { limit, retryAfter: RETRY_AFTER_S });
  }

  /** The org's feed, started at the head when this process has none. */
  async feed(org: string): Promise<OrgFeed> {
    let feed = this.feeds.get(org);
    if (!feed) {
      const head = await this.store.auditPosition(org);
      feed = this.feeds.get(org) ?? new OrgFeed(this.store, org, head, this.hooks);
      this.feeds.set(org, feed);
    }
    return feed;
  }

  /** Starts a stream (already admitted) on the org's feed. */
  open(options: Omit<WatcherOptions, 'onEnd' | 'onError' | 'onReplay' | 'bufferBytes' | 'behindMs' | 'held' | 'store' | 'auth' | 'longRead'>, token: string | undefined): Watcher {
    const link = options.principal.link;
    const who = identity(options.principal);
    const watcher = new Watcher({
      ...options,
      store: this.store,
      auth: this.auth,
      bufferBytes: this.limits.bufferBytes,
      behindMs: this.limits.behindMs,
      held: this.heldBytes,
      onEnd: (w) => this.release(w),
      onError: this.onError,
      onReplay: (w, replaying) => count(this.replays, w.principal.link, replaying ? 1 : -1),
      // An open stream's next chunk cannot be refused: it waits (one at a time per stream).
      longRead: (read) => this.scheduler.run('longReads', who, read, { mustWait: true }),
    });
    this.held.set(watcher, {
      watcher,
      credential: credentialOf(token),
      question: `${link}\n${watcher.org}\n${watcher.kind ?? ''}\n${watcher.viewing}`,
    });
    count(this.streams, link, 1);
    options.feed.subscribers.add(watcher);
    watcher.wake();
    return watcher;
  }

  /** Ends every stream (server shutdown). */
  close(): void {
    clearInterval(this.bookmarks);
    clearInterval(this.recheck);
    changes.off('change', this.onChange);
    // Held refusals are answered now rather than holding up the shutdown.
    for (const [resolve, timer] of this.held429) {
      clearTimeout(timer);
      resolve();
    }
    this.held429.clear();
    this.endStreams();
  }

  /** Ends every stream and drops the feeds, whose positions belong to a history that was replaced (a restore or reset). */
  endStreams(): void {
    for (const { watcher } of [...this.held.values()]) watcher.end();
    for (const feed of this.feeds.values()) feed.close();
    this.feeds.clear();
  }

  /**
   * Whether the principal is still a member of the org and, if it could view some of what the watch
   * follows when it opened, still can (a watch that could view nothing stays open: it shows nothing).
   */
  private async mayWatch(watcher: Watcher): Promise<boolean> {
    await this.auth.requireMember(watcher.principal, watcher.org);
    return !watcher.viewing || (await viewsAny(this.auth, watcher.principal, watcher.org, watcher.kind));
  }

  private release(watcher: Watcher): void {
    if (!this.held.delete(watcher)) return;
    count(this.streams, watcher.principal.link, -1);
    const feed = this.feeds.get(watcher.org);
    if (!feed) return;
    feed.subscribers.delete(watcher);
    if (feed.subscribers.size === 0) {
      feed.close();
      this.feeds.delete(watcher.org);
    }
  }

  /**
   * Changes to access-bearing items of `org` (seen as this process wrote them, or as a feed read
   * them): a deleted service account's streams end at once; the others that the change may concern
   * (watching the org, or whose principal belongs to it) are held, with the org's cached decisions
   * dropped, until they are checked again.
   */
  private accessChanged(org: string, events: Array<{ kind: string; name: string; action: string }>): void {
    for (const event of events) {
      if (event.kind !== 'serviceaccount' || event.action !== 'delete') continue;
      const link = `/org/${org}/serviceaccount/${event.name}`;
      for (const { watcher } of [...this.held.values()]) if (watcher.principal.link === link) watcher.end();
    }
    this.auth.invalidate(org);
    this.markDirty((w) => w.org === org || w.principal.org === org, true);
  }

  /** Queues the chosen watchers for checkDirty(), holding them meanwhile when `hold`. */
  private markDirty(chosen: (watcher: Watcher) => boolean, hold: boolean): void {
    for (const { watcher } of this.held.values()) {
      if (!chosen(watcher)) continue;
      if (hold) watcher.pause();
      this.dirty.add(watcher);
    }
    void this.checkDirty();
  }

  /**
   * Checks the held watchers: the key each was opened with must still exist (read from the store,
   * not from the authenticator's cache) and its principal must still be a member of the org; the
   * others end. One lookup per distinct key and principal, however many streams share them.
   */
  /** Whose the credential is now: a key's service account, a running replica's identity; undefined once revoked or stopped. */
  private async ownerOf(credential: string): Promise<string | undefined> {
    const [kind, id] = credential.split(' ');
    if (kind === 'replica') {
      const r = await this.store.findReplicaToken(id);
      return r && `/org/${r.org}/gvc/${r.gvc}/identity/${r.identity}`;
    }
    const r = await this.store.findKey(id);
    return r && `/org/${r.org}/serviceaccount/${r.serviceAccount}`;
  }

  private async checkDirty(): Promise<void> {
    if (this.checking) return;
    this.checking = true;
    try {
      while (this.dirty.size) {
        const watchers = [...this.dirty].filter((w) => w.open);
        this.dirty.clear();
        // One question per distinct key and per distinct principal, org and kind; answered together.
        const keys = new Map<string, Promise<string | undefined>>();
        const members = new Map<string, Promise<boolean>>();
        const asked: Array<{ watcher: Watcher; credential?: string; member: string }> = [];
        for (const watcher of watchers) {
          const held = this.held.get(watcher);
          if (!held) continue;
          const { credential, question: member } = held;
          if (credential !== undefined && !keys.has(credential)) {
            // A lookup that fails ends the stream rather than leaving it unchecked.
            keys.set(credential, this.ownerOf(credential).catch((err) => void this.onError(err)));
          }
          if (!members.has(member)) {
            members.set(
              member,
              this.mayWatch(watcher).then(
                (may) => may,
                (err) => {
                  if (!(err instanceof ApiError && err.code === 'forbidden')) this.onError(err);
                  return false;
                },
              ),
            );
          }
          asked.push({ watcher, credential, member });
        }
        const keyOwners = new Map<string, string | undefined>();
        for (const [name, owner] of keys) keyOwners.set(name, await owner);
        const allowed = new Map<string, boolean>();
        for (const [member, may] of members) allowed.set(member, await may);
        for (const { watcher, credential, member } of asked) {
          // Checked again meanwhile (or ended): its newest check decides.
          if (!watcher.open || this.dirty.has(watcher)) continue;
          const keyValid = credential === undefined || keyOwners.get(credential) === watcher.principal.link;
          if (keyValid && allowed.get(member)) {
            if (watcher.paused) watcher.resume();
          } else watcher.end();
        }
      }
    } finally {
      this.checking = false;
    }
  }
}

/** Whether the principal may view some items of the kind (of any kind when undefined) in the org. */
export async function viewsAny(auth: Authorizer, principal: Principal, org: string, kind: string | undefined): Promise<boolean> {
  const scopes = await auth.viewScope(principal, org);
  return kind === undefined ? scopes.size > 0 : scopes.has(kind);
}

function count(counts: Map<string, number>, key: string, by: number): void {
  const n = (counts.get(key) ?? 0) + by;
  if (n > 0) counts.set(key, n);
  else counts.delete(key);
}

/** What identifies a stream's credential for checking it again (see WatchHub.ownerOf); undefined for a JWT. */
function credentialOf(token: string | undefined): string | undefined {
  if (token === undefined) return undefined;
  if (isReplicaToken(token)) return `replica ${replicaTokenHash(token)}`;
  const key = parseKey(token)?.keyName;
  return key && `key ${key}`;
}
