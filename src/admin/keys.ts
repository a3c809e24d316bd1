// The first org's bootstrap key: minted on the first start, or fixed by KEEL_ADMIN_KEY so that a
// pipeline knows it in advance. Either way only its hash is stored.
import { chmodSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { changeEvent, KEEL_ACTOR } from '../audit/events.js';
import { hashSecret, parseKey, type MintedKey } from '../auth/keys.js';
import { findKind } from '../kinds/index.js';
import { present } from '../resources/present.js';
import type { Store } from '../store/types.js';

/** The service account that holds the bootstrap key, and how the key is described in it. */
export const ADMIN_ACCOUNT = 'admin';
export const BOOTSTRAP_KEY_DESCRIPTION = 'bootstrap admin key';

/** A stored key as createOrg takes it: its name and the hash of its secret. */
export type KeyHash = Pick<MintedKey, 'keyName' | 'secretHash'> & { token?: string };

/**
 * KEEL_ADMIN_KEY, checked: a key in Keel's format for the 'admin' account of `org` whose secret is
 * 32 bytes that do not look made up (few distinct bytes, or a constant step between them).
 */
export function fixedAdminKey(token: string, org: string): MintedKey {
  const fail = (why: string) => new Error(`KEEL_ADMIN_KEY is not usable: ${why}. 'keel key generate --org ${org}' prints a good one`);
  const parsed = parseKey(token.trim());
  if (!parsed) throw fail("it is not a Keel key (<keyName>.<base64url of 'org.admin.keyName'>.<secret>)");
  if (parsed.org !== org) throw fail(`it is a key of org '${parsed.org}', but the first org is '${org}' (KEEL_ORG)`);
  if (parsed.serviceAccount !== ADMIN_ACCOUNT) throw fail(`it is a key of service account '${parsed.serviceAccount}', not '${ADMIN_ACCOUNT}'`);
  if (!/^[A-Za-z0-9_-]{43}$/.test(parsed.secret)) throw fail('its secret is not 32 bytes in base64url (43 characters)');
  if (weak(Buffer.from(parsed.secret, 'base64url'))) throw fail('its secret is weak (too few distinct bytes, or a regular pattern); use random bytes');
  return { keyName: parsed.keyName, token: token.trim(), secretHash: hashSecret(parsed.secret) };
}

/** 32 random bytes have about 30 distinct values and about 30 distinct steps between neighbours; under 16 is not chance. */
function weak(secret: Buffer): boolean {
  const steps = new Set<number>();
  for (let i = 1; i < secret.length; i++) steps.add((secret[i] - secret[i - 1] + 256) % 256);
  return new Set(secret).size < 16 || steps.size < 16;
}

/** Writes the bootstrap key where `keel serve` promises it: $KEEL_DATA_DIR/admin.token, mode 0600. */
export function writeAdminToken(dataDir: string, token: string): string {
  mkdirSync(dataDir, { recursive: true });
  const file = join(dataDir, 'admin.token');
  writeFileSync(file, `${token}\n`, { mode: 0o600 });
  chmodSync(file, 0o600);
  return file;
}

/**
 * Makes sure the org's admin account holds the key (a store made before KEEL_ADMIN_KEY was set, or
 * with another one): added when missing; a key name already used with another secret is refused.
 */
export async function ensureAdminKey(store: Store, org: string, key: KeyHash): Promise<void> {
  const existing = await store.findKey(key.keyName);
  if (existing) {
    if (existing.org === org && existing.serviceAccount === ADMIN_ACCOUNT && existing.secretHash === key.secretHash) return;
    throw new Error(`KEEL_ADMIN_KEY is not usable: its key name ${key.keyName} is already used by another key`);
  }
  await addAdminKey(store, org, key, `${BOOTSTRAP_KEY_DESCRIPTION} (KEEL_ADMIN_KEY)`);
}

/** Adds a key to the org's 'admin' service account (a superuser since the org was created), with its audit event. */
export async function addAdminKey(store: Store, org: string, key: KeyHash, description: string): Promise<void> {
  const created = new Date().toISOString();
  await store.transaction(async (tx) => {
    const sa = await tx.get({ org, kind: 'serviceaccount', gvc: '', name: ADMIN_ACCOUNT }, 'update');
    if (!sa) throw new Error(`org '${org}' has no service account '${ADMIN_ACCOUNT}'; create the org with 'keel org create ${org}'`);
    const keys = [...((sa.data.keys as unknown[]) ?? []), { name: key.keyName, description, created }];
    const updated = { ...sa, version: sa.version + 1, lastModified: created, data: { ...sa.data, keys } };
    await tx.update(updated, sa.version);
    await tx.putKey({ keyName: key.keyName, org, serviceAccount: ADMIN_ACCOUNT, secretHash: key.secretHash, created });
    await tx.appendAudit(changeEvent(org, KEEL_ACTOR, 'addKey', present(findKind('serviceaccount')!, updated)));
  });
}

/**
 * The key a reset keeps: KEEL_ADMIN_KEY's, or the one minted at the first start (the admin
 * account's key described as the bootstrap key). Undefined when that key is gone.
 */
export async function bootstrapKey(store: Store, org: string, adminKey: string | undefined): Promise<KeyHash | undefined> {
  if (adminKey) return fixedAdminKey(adminKey, org);
  const sa = await store.get({ org, kind: 'serviceaccount', gvc: '', name: ADMIN_ACCOUNT });
  const keys = (sa?.data.keys ?? []) as Array<{ name: string; description?: string }>;
  for (const k of keys.filter((k) => k.description === BOOTSTRAP_KEY_DESCRIPTION)) {
    const record = await store.findKey(k.name);
    if (record?.org === org && record.serviceAccount === ADMIN_ACCOUNT) return { keyName: record.keyName, secretHash: record.secretHash };
  }
  return undefined;
}
