import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

// Service-account keys: `<keyName>.<base64url(org.sa.keyName)>.<secret>`. The CLI reads the org
// from the middle part; clients take the key name as the part before the first dot. Only a
// SHA-256 of the secret is stored: the secret is 256 random bits, so a slow hash adds nothing.

const BASE32 = 'abcdefghijklmnopqrstuvwxyz234567';

export interface MintedKey {
  keyName: string;
  token: string;
  secretHash: string;
}

export function mintKey(org: string, serviceAccount: string): MintedKey {
  const bytes = randomBytes(15);
  const keyName = 's' + [...bytes].map((b) => BASE32[b % 32]).join('');
  const middle = Buffer.from(`${org}.${serviceAccount}.${keyName}`).toString('base64url');
  const secret = randomBytes(32).toString('base64url');
  return { keyName, token: `${keyName}.${middle}.${secret}`, secretHash: hashSecret(secret) };
}

export function hashSecret(secret: string): string {
  return createHash('sha256').update(secret).digest('hex');
}

export interface ParsedKey {
  keyName: string;
  org: string;
  serviceAccount: string;
  secret: string;
}

/** Splits a presented token; undefined when it is not shaped like a Keel key. */
export function parseKey(token: string): ParsedKey | undefined {
  const parts = token.split('.');
  if (parts.length !== 3 || !/^s[a-z2-7]{15}$/.test(parts[0])) return undefined;
  const middle = Buffer.from(parts[1], 'base64url').toString('utf8').split('.');
  if (middle.length !== 3 || middle[2] !== parts[0]) return undefined;
  return { keyName: parts[0], org: middle[0], serviceAccount: middle[1], secret: parts[2] };
}

/** Constant-time comparison of a presented secret with a stored hash. */
export function secretMatches(secret: string, storedHash: string): boolean {
  const presented = Buffer.from(hashSecret(secret), 'hex');
  const stored = Buffer.from(storedHash, 'hex');
  return presented.length === stored.length && timingSafeEqual(presented, stored);
}
