import type { AuditRecord, Store } from '../store/types.js';
import { chainHash } from './chain.js';
import { isKeelRestore } from './events.js';

/** A snapshot's restore as the chain records it: the state went back to `position` at event `seq`. */
export interface RestoreMark {
  seq: number;
  at: string;
  by: string;
  snapshot: string;
  position: number;
  /** The snapshot came from a chain a reset replaced since: `position` was one of that chain's. */
  earlierChain: boolean;
}

export type ChainReport =
  | { ok: true; events: number; from: number; to: number; restores: RestoreMark[] }
  | { ok: false; events: number; brokenAt: number; reason: string };

/**
 * Recomputes an org's audit chain from the anchor left by retention (or the start) to the head
 * as it was when called (events appended meanwhile are left for the next check), and names the
 * first link that does not hold: an edited event, a missing one, or a cut tail. An intact chain's
 * report lists the snapshot restores it records (the points where the state went back).
 */
export async function verifyChain(store: Store, org: string): Promise<ChainReport> {
  const head = await store.auditHead(org);
  let previous = head.prunedHash;
  let expected = head.prunedUpTo + 1;
  let events = 0;
  const restores: RestoreMark[] = [];
  for (;;) {
    const page = await store.audit({ org, afterSeq: expected - 1, throughSeq: head.seq, limit: 1000 });
    if (page.length === 0) break;
    for (const event of page) {
      if (event.seq !== expected) return { ok: false, events, brokenAt: expected, reason: `event ${expected} is missing` };
      if (chainHash(previous, event.seq, event.body) !== event.hash) {
        return { ok: false, events, brokenAt: event.seq, reason: `event ${event.seq} (${event.id}) does not match its hash: it was altered` };
      }
      if (isKeelRestore(event)) restores.push(restoreMark(event));
      previous = event.hash;
      expected++;
      events++;
    }
  }
  if (expected - 1 !== head.seq || previous !== head.hash) {
    return { ok: false, events, brokenAt: expected, reason: `the chain ends at event ${expected - 1} but its head is at ${head.seq}: events were removed` };
  }
  return { ok: true, events, from: head.prunedUpTo + 1, to: head.seq, restores };
}

function restoreMark(event: AuditRecord): RestoreMark {
  const data = (JSON.parse(event.body) as { resource?: { data?: { snapshot?: string; position?: number; earlierChain?: boolean } } }).resource?.data;
  return { seq: event.seq, at: event.eventTime, by: event.subjectName, snapshot: String(data?.snapshot ?? ''), position: Number(data?.position ?? 0), earlierChain: data?.earlierChain === true };
}
