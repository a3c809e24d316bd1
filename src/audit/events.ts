import { randomUUID } from 'node:crypto';
import type { Principal } from '../auth/principal.js';
import type { KindDef, Resource } from '../kinds/types.js';
import { jsonOf, withoutHidden } from '../resources/present.js';
import type { AuditRecord, NewAuditEvent } from '../store/types.js';

/**
 * A new event id: a UUID of version 7 (RFC 9562), whose leading bits are the time in ms and then a
 * counter, so ids of successive events sort in time order and insert at the end of the id index
 * instead of at a random page of it. The random bits are drawn once per millisecond and the
 * counter orders the ids within it (the RFC's method 1); a spent counter borrows the next
 * millisecond, so this process's ids stay strictly increasing.
 */
export function newEventId(): string {
  const now = Date.now();
  if (now > idMs || ++idCounter > 0xfff) {
    idMs = Math.max(now, idMs + 1);
    idCounter = 0;
    const time = idMs.toString(16).padStart(12, '0');
    idTime = `${time.slice(0, 8)}-${time.slice(8)}-7`;
    idRandom = randomUUID().slice(19); // its last two groups carry the RFC 9562 variant bits and randomness
  }
  return `${idTime}${idCounter.toString(16).padStart(3, '0')}-${idRandom}`;
}
let idMs = 0;
let idCounter = 0;
let idTime = '';
let idRandom = '';

/** The platform's own audit context: every mutation made through the API lands here. */
export const PLATFORM_CONTEXT = 'cpln';

export interface Actor {
  /** The principal's name (a user's email, a service account's name), or 'keel' for Keel itself. */
  name: string;
  /** serviceaccount, user, or keel. */
  type: string;
  link?: string;
  requestId?: string;
  remoteIp?: string;
}

export const KEEL_ACTOR: Actor = { name: 'keel', type: 'keel' };

export function actorOf(principal: Principal): Actor {
  return { name: principal.name, type: principal.kind, link: principal.link, requestId: principal.requestId, remoteIp: principal.remoteIp };
}

/** The event's subject; `data.type` and `data.principalLink` are what the CLI's audit table shows. */
export function subjectOf(actor: Actor, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { name: actor.name, data: { ...extra, type: actor.type, ...(actor.link ? { principalLink: actor.link } : {}) } };
}

/** The time as an ISO string, made once per millisecond (changes come many to a millisecond under load). */
function isoNow(): string {
  const ms = Date.now();
  if (ms !== isoMs) {
    isoMs = ms;
    iso = new Date(ms).toISOString();
  }
  return iso;
}
let isoMs = -1;
let iso = '';

/** subjectOf(actor) as JSON, made once per principal (a few serve almost every change). */
function subjectJson(actor: Actor): string {
  const key = `${actor.type}\n${actor.name}\n${actor.link ?? ''}`;
  let json = subjects.get(key);
  if (json === undefined) {
    if (subjects.size >= SUBJECTS_KEPT) subjects.clear();
    json = JSON.stringify(subjectOf(actor));
    subjects.set(key, json);
  }
  return json;
}
const subjects = new Map<string, string>();
const SUBJECTS_KEPT = 1000;

/**
 * An audit event of a change to `resource` (as clients see it: hidden fields such as secret
 * values and key hashes are already gone, so they never reach the log). The snapshot in
 * `resource.data` is the resource's JSON as the response to the change carries it. Every mutation
 * makes one, so its JSON is written out in one template rather than built as nested objects and
 * serialized; every string in it goes through JSON.stringify.
 */
export function changeEvent(org: string, actor: Actor, action: string, resource: Resource): NewAuditEvent {
  const id = newEventId();
  const now = isoNow();
  const self = resource.links.find((l) => l.rel === 'self')?.href;
  const q = JSON.stringify;
  const remoteIp = actor.remoteIp ? `,"remoteIp":${q(actor.remoteIp)}` : '';
  const link = self === undefined ? '' : `,"link":${q(self)}`;
  const body =
    `{"id":"${id}","eventTime":"${now}","postedTime":"${now}","receivedTime":"${now}","requestId":${q(actor.requestId ?? id)},` +
    `"context":{"org":${q(org)},"name":"${PLATFORM_CONTEXT}","eventSource":"keel"${remoteIp}},"subject":${subjectJson(actor)},` +
    `"action":{"type":${q(action)}},"result":{"status":"success"},` +
    `"resource":{"id":${q(resource.id)},"name":${q(resource.name)},"type":${q(resource.kind)}${link},"version":${resource.version},"data":${jsonOf(resource)}}}`;
  return {
    org,
    id,
    context: PLATFORM_CONTEXT,
    eventTime: now,
    resourceType: resource.kind,
    resourceName: resource.name,
    resourceId: resource.id,
    subjectName: actor.name,
    actionType: action,
    body,
  };
}

/** The action of the event a restore appends. */
export const RESTORE_ACTION = 'restore';

/** The actions of the events Keel writes itself: a custom event may not take them (see audit-api.ts). */
export const KEEL_ACTIONS: ReadonlySet<string> = new Set(['create', 'edit', 'delete', 'status', 'addKey', RESTORE_ACTION]);

/**
 * Whether a stored event is a restore Keel wrote. The action alone does not tell: before custom
 * events were refused Keel's actions and context, anyone with writeAudit could have stored one
 * with action `restore`. Only Keel writes an event whose body says `eventSource: "keel"` (a custom
 * event's says `custom`, set by the server), and the body is covered by the chain's hash.
 */
export function isKeelRestore(record: Pick<AuditRecord, 'context' | 'actionType' | 'body'>): boolean {
  if (record.context !== PLATFORM_CONTEXT || record.actionType !== RESTORE_ACTION) return false;
  const body = JSON.parse(record.body) as { context?: { eventSource?: unknown } };
  return body.context?.eventSource === 'keel';
}

/**
 * The event a snapshot's restore appends to each org whose state it rewound: who restored which
 * snapshot, and the position of the org's chain that the state now reflects (the events between it
 * and this one were undone, though they stay in the chain). A snapshot taken before a reset holds a
 * position of the chain the reset replaced: `earlierChain` says so, as no event of this one matches.
 */
export function restoreEvent(org: string, actor: Actor, snapshot: string, { position, earlierChain }: { position: number; earlierChain?: boolean }): NewAuditEvent {
  return orgEvent(org, actor, RESTORE_ACTION, org, { snapshot, position, ...(earlierChain ? { earlierChain } : {}) });
}

/** An event Keel writes in `chainOrg`'s chain about the org `about` (itself, or a sandbox it removed). */
function orgEvent(chainOrg: string, actor: Actor, action: string, about: string, data: Record<string, unknown>): NewAuditEvent {
  const id = newEventId();
  const now = isoNow();
  const body = JSON.stringify({
    id,
    eventTime: now,
    postedTime: now,
    receivedTime: now,
    requestId: actor.requestId ?? id,
    context: { org: chainOrg, name: PLATFORM_CONTEXT, eventSource: 'keel', ...(actor.remoteIp ? { remoteIp: actor.remoteIp } : {}) },
    subject: subjectOf(actor),
    action: { type: action },
    result: { status: 'success' },
    resource: { id: '', name: about, type: 'org', link: `/org/${about}`, data },
  });
  return { org: chainOrg, id, context: PLATFORM_CONTEXT, eventTime: now, resourceType: 'org', resourceName: about, resourceId: '', subjectName: actor.name, actionType: action, body };
}

/** The action of the event a sandbox's removal appends to the first org's chain. */
export const SANDBOX_REMOVED_ACTION = 'delete';

/**
 * The event the first org's chain gets when a sandbox is removed (its own chain goes with it): which
 * sandbox, why (`ttl`, `request`, or `seed` when its seed was refused) and who removed it (Keel
 * itself at the TTL, else the caller).
 */
export function sandboxRemovedEvent(firstOrg: string, actor: Actor, sandbox: string, reason: 'ttl' | 'request' | 'seed', expiresAt: string): NewAuditEvent {
  return orgEvent(firstOrg, actor, SANDBOX_REMOVED_ACTION, sandbox, { sandbox: { expiresAt, removedBy: reason } });
}

/** An event as the APIs return it: the recorded body plus its place in the org's chain. */
export function eventView(record: AuditRecord): Record<string, unknown> {
  return { ...JSON.parse(record.body), seq: record.seq, hash: record.hash };
}

/** An audit event in the shape of the `event` kind, as an item's -eventlog lists it. */
export function eventlogEntry(record: AuditRecord): Record<string, unknown> {
  const event = eventView(record);
  return {
    kind: 'event',
    id: record.id,
    created: record.eventTime,
    lastEventTime: record.eventTime,
    eventCount: 1,
    status: record.actionType,
    pinned: false,
    ...event,
  };
}

/** One version of an item, as its -history lists it: who changed it, when, how, and the item as it then was. */
export function historyEntry(def: KindDef, record: AuditRecord): Record<string, unknown> {
  const event = JSON.parse(record.body) as { eventTime: string; subject: unknown; action: { type: string }; resource: { version: number; data: Resource } };
  const resource = withoutHidden(event.resource.data, def.hidden ?? []);
  return { version: event.resource.version, action: event.action.type, at: event.eventTime, subject: event.subject, resource };
}
