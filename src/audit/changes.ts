import { EventEmitter } from 'node:events';
import type { Resource } from '../kinds/types.js';
import type { NewAuditEvent, Store } from '../store/types.js';

/**
 * Emits 'change' (org, appended?) after a committed write, so local watchers need not wait for
 * their next poll. `appended` is the write's event: when the store has set its seq, a follower of
 * the chain that is at seq - 1 may take it from here instead of reading it back.
 */
export const changes = new EventEmitter().setMaxListeners(0);

export interface AppendedEvent {
  event: NewAuditEvent;
  /** The resource the event's snapshot shows. */
  resource: Resource;
}

/**
 * Announces a committed write once its events are in the chain (PostgreSQL chains them after
 * commit), so whoever follows the log finds each event at its seq: one 'change' per event, or one
 * without an event when the write appended none.
 */
export function announce(store: Store, org: string, appended: readonly AppendedEvent[]): void {
  void store.chained(appended.map((a) => a.event)).then(() => {
    if (appended.length === 0) changes.emit('change', org);
    for (const each of appended) changes.emit('change', org, each);
  });
}
