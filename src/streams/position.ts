import type { Store } from '../store/types.js';

/** The response header that names the chain position a read reflects. */
export const POSITION_HEADER = 'keel-seq';

const ATTEMPTS = 4;

/**
 * Runs a read of the org's items and finds the org's chain position (its last audit seq) that the
 * read reflects: the position is read before and after, and when no change committed in between
 * (and none was waiting for its seq) the read shows exactly the changes up to it. Racing writes
 * make it read again, a few times; if they never stop, the position from before the last read is
 * given, which a watch resumes from without a gap (it may then deliver a change the read already
 * showed, at a higher version).
 */
export async function readAt<T>(store: Store, org: string, read: () => Promise<T>): Promise<{ value: T; seq: number }> {
  for (let attempt = 1; ; attempt++) {
    const before = await store.auditPosition(org);
    const value = await read();
    if (attempt === ATTEMPTS) return { value, seq: before.seq };
    const after = await store.auditPosition(org);
    if (after.seq === before.seq && !after.pending) return { value, seq: before.seq };
    // Gives the waiting events their seqs (PostgreSQL) before reading again.
    if (after.pending) await store.auditHead(org);
  }
}
