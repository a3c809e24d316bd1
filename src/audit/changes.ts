import { EventEmitter } from 'node:events';

/** Emits 'change' (org) after a committed write, so local watchers need not wait for their next poll. */
export const changes = new EventEmitter().setMaxListeners(0);
