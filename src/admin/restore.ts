// A snapshot's restore as the admin route and `keel snapshot restore` run it: the orgs' state goes
// back to the snapshot's, and each org whose state that changes gets an event in its audit chain
// naming who restored which snapshot to which position (store/snapshots.ts says what is rewound).
import { restoreEvent, type Actor } from '../audit/events.js';
import type { RestoredOrg } from '../store/snapshots.js';
import type { Store } from '../store/types.js';

export async function restoreSnapshot(store: Store, name: string, actor: Actor): Promise<RestoredOrg[]> {
  return store.snapshots.restore(name, (restored) => restored.map((r) => restoreEvent(r.org, actor, name, r)));
}
