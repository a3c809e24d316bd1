// Reset: back to the state right after the seed. Every org, item, key and audit event goes, then
// the first org is created again with its bootstrap key and the seed is applied, all in one
// transaction; then every Keel process on the store forgets what it remembered of the old state.
// That state is kept as a snapshot of Keel's own (its name a digest of the org, the key and the
// seed), so the next reset with the same seed is one restore: a handful of statements rather
// than the org's hundred-odd built-ins and the seed written item by item.
import { createHash } from 'node:crypto';
import { KEEL_ACTOR } from '../audit/events.js';
import { mintKey } from '../auth/keys.js';
import type { Config } from '../config.js';
import { ApiError } from '../errors.js';
import { accountLinkOf, createOrg } from '../resources/orgs.js';
import { inOneTransaction } from '../store/in-transaction.js';
import { INTERNAL_PREFIX } from '../store/snapshots.js';
import type { Store } from '../store/types.js';
import { ADMIN_ACCOUNT, bootstrapKey, writeAdminToken } from './keys.js';
import { applySeedIn, readSeed } from './seed.js';

export interface ResetResult {
  org: string;
  /** How many seed documents the state holds. */
  seeded: number;
  /** A new bootstrap key, when the old one was gone (also written to admin.token). */
  token?: string;
}

/** Resets the store; the seed (KEEL_INIT) is read again, so a bad one leaves everything as it was. */
export async function resetStore(store: Store, config: Config): Promise<ResetResult> {
  const seed = config.init ? readSeed(config.init) : [];
  let key = await bootstrapKey(store, config.org, config.adminKey);
  let token: string | undefined;
  if (!key) {
    const minted = mintKey(config.org, ADMIN_ACCOUNT);
    key = minted;
    token = minted.token;
  }
  const digest = createHash('sha256')
    .update(JSON.stringify([config.org, key.keyName, key.secretHash, seed.map((d) => d.body)]))
    .digest('hex')
    .slice(0, 32);
  const baseline = `${INTERNAL_PREFIX}reset-${digest}`;
  try {
    await store.snapshots.replaceAll(baseline);
  } catch (err) {
    if (!(err instanceof ApiError && err.code === 'not_found')) throw err;
    const events = await inOneTransaction(store, async (inner) => {
      await inner.transaction((tx) => tx.clearAll());
      await createOrg(inner, { name: config.org, actor: KEEL_ACTOR, superusers: [], accountLink: accountLinkOf(config.org), adminServiceAccount: ADMIN_ACCOUNT, adminKey: key });
      const outcomes = await applySeedIn(inner, config.org, seed);
      // The org's event, its admin account's, and one per seeded item.
      return 2 + outcomes.length;
    });
    await store.replaced();
    await keepBaseline(store, config.org, baseline, events);
  }
  if (token) writeAdminToken(config.dataDir, token);
  return { org: config.org, seeded: seed.length, ...(token ? { token } : {}) };
}

/**
 * Saves the fresh state as the baseline, unless a write slipped in between the reset's commit and
 * the snapshot (anything that did shows in the org list or the chain head, read after it).
 */
async function keepBaseline(store: Store, org: string, name: string, events: number): Promise<void> {
  try {
    await store.snapshots.save(name);
  } catch (err) {
    if (err instanceof ApiError && err.code === 'already_exists') return; // another process kept it first
    throw err;
  }
  const orgs = await store.orgs();
  const head = await store.auditHead(org);
  if (orgs.length !== 1 || orgs[0] !== org || head.seq !== events) await store.snapshots.delete(name);
}
