// Keel's own directory of people: an invitation link (one-time, 7 days) lets its email set a
// password; passwords are kept as scrypt hashes. Records live in the store (auth/user-tokens.ts
// has the signing key), so every process sharing it agrees.
import { createHash, randomBytes, scrypt as scryptCallback, timingSafeEqual, type ScryptOptions } from 'node:crypto';
import type { Store } from '../store/types.js';

const INVITATION_MS = 7 * 86_400_000;
const SCRYPT = { N: 2 ** 15, r: 8, p: 1, maxmem: 64 * 1024 * 1024 };
export const MIN_PASSWORD = 12;
const MAX_PASSWORD = 256;

function scrypt(password: string, salt: Buffer, options: ScryptOptions): Promise<Buffer> {
  return new Promise((resolve, reject) => scryptCallback(password, salt, 32, options, (err, key) => (err ? reject(err) : resolve(key))));
}

export function hashOf(secret: string): string {
  return createHash('sha256').update(secret).digest('base64url');
}

/** A hash made once, compared against when an email has no password, so the answer takes as long either way. */
let decoy: Promise<string> | undefined;

export class Directory {
  constructor(private readonly store: Store) {}

  /** A new invitation of `email` to `org`: the secret of its link. */
  async invite(email: string, org: string): Promise<string> {
    const secret = randomBytes(32).toString('base64url');
    await this.store.transaction((tx) => tx.putSignIn('invitation', hashOf(secret), JSON.stringify({ email, org }), Date.now() + INVITATION_MS));
    return secret;
  }

  /** The invitation a link's secret names, while it is unused and unexpired. */
  async invitation(secret: string): Promise<{ email: string; org: string } | undefined> {
    const data = await this.store.findSignIn('invitation', hashOf(secret));
    return data ? (JSON.parse(data) as { email: string; org: string }) : undefined;
  }

  /** Uses the invitation to set its email's password; undefined when the link is unknown, used or expired. */
  async accept(secret: string, password: string): Promise<string | undefined> {
    const stored = await passwordHash(password);
    return this.store.transaction(async (tx) => {
      const data = await tx.takeSignIn('invitation', hashOf(secret));
      if (!data) return undefined;
      const { email } = JSON.parse(data) as { email: string };
      await tx.putSignIn('password', email.toLowerCase(), stored, 0);
      return email;
    });
  }

  /** Whether the password is the email's (false when the email has none). */
  async verify(email: string, password: string): Promise<boolean> {
    if (password.length > MAX_PASSWORD) return false;
    const stored = (await this.store.findSignIn('password', email.toLowerCase())) ?? (await (decoy ??= passwordHash(randomBytes(16).toString('hex'))));
    const [scheme, n, r, p, salt, hash] = stored.split('$');
    if (scheme !== 'scrypt') return false;
    const expected = Buffer.from(hash, 'base64url');
    const actual = await scrypt(password, Buffer.from(salt, 'base64url'), { N: Number(n), r: Number(r), p: Number(p), maxmem: SCRYPT.maxmem });
    return timingSafeEqual(actual, expected) && (await this.store.findSignIn('password', email.toLowerCase())) !== undefined;
  }
}

export function passwordProblem(password: unknown): string | undefined {
  if (typeof password !== 'string' || password.length < MIN_PASSWORD) return `the password must have at least ${MIN_PASSWORD} characters`;
  if (password.length > MAX_PASSWORD) return `the password must have at most ${MAX_PASSWORD} characters`;
  return undefined;
}

async function passwordHash(password: string): Promise<string> {
  const salt = randomBytes(16);
  const hash = await scrypt(password, salt, SCRYPT);
  return ['scrypt', SCRYPT.N, SCRYPT.r, SCRYPT.p, salt.toString('base64url'), hash.toString('base64url')].join('$');
}

/**
 * Failed attempts per key (an address, an email) in a sliding window: past `limit` in `windowMs`,
 * further attempts are refused until the oldest failures leave the window. Kept per process.
 */
export class Attempts {
  private readonly failures = new Map<string, number[]>();

  constructor(
    private readonly limit: number,
    private readonly windowMs: number,
  ) {}

  /** Seconds until an attempt is allowed again (0: now). */
  retryAfter(key: string): number {
    const now = Date.now();
    const recent = (this.failures.get(key) ?? []).filter((t) => now - t < this.windowMs);
    if (recent.length) this.failures.set(key, recent);
    else this.failures.delete(key);
    return recent.length < this.limit ? 0 : Math.ceil((recent[0] + this.windowMs - now) / 1000);
  }

  fail(key: string): void {
    if (this.failures.size > 100_000) this.failures.clear();
    const list = this.failures.get(key) ?? [];
    list.push(Date.now());
    this.failures.set(key, list);
  }
}
