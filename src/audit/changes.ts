import { EventEmitter } from 'node:events';
import type { Resource } from '../kinds/types.js';
import type { NewAuditEvent } from '../store/types.js';

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
