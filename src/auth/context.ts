import { AsyncLocalStorage } from 'node:async_hooks';
import type { Principal } from './principal.js';

// The principal of the request being served, for kind hooks that must know who is asking
// (a caller may not remove itself from superusers) without it being threaded through the store.
const current = new AsyncLocalStorage<Principal>();

/** Runs `fn` (and everything it starts) as `principal`. */
export function runAs<T>(principal: Principal, fn: () => T): T {
  return current.run(principal, fn);
}

export function currentPrincipal(): Principal | undefined {
  return current.getStore();
}
