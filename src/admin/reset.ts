// Reset: back to the state right after the seed. Every org, item, key and audit event goes, then
// the first org is created again with its bootstrap key and the seed is applied, all in one
// transaction; then every Keel process on the store forgets what it remembered of the old state.
import { KEEL_ACTOR } from '../audit/events.js';
import { mintKey } from '../auth/keys.js';
import type { Config } from '../config.js';
import { createOrg } from '../resources/orgs.js';
import { inOneTransaction } from '../store/in-transaction.js';
import type { Store } from '../store/types.js';
import { ADMIN_ACCOUNT, bootstrapKey, writeAdminToken } from './keys.js';
import { applySeedIn, readSeed, type SeedOutcome } from './seed.js';

export interface ResetResult {
  org: string;
  seeded: SeedOutcome[];
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
  const seeded = await inOneTransaction(store, async (inner) => {
    await inner.transaction((tx) => tx.clearAll());
    await createOrg(inner, { name: config.org, actor: KEEL_ACTOR, superusers: [], adminServiceAccount: ADMIN_ACCOUNT, adminKey: key });
    return applySeedIn(inner, config.org, seed);
  });
  await store.replaced();
  if (token) writeAdminToken(config.dataDir, token);
  return { org: config.org, seeded, ...(token ? { token } : {}) };
}
