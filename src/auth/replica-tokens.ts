// CPLN_TOKEN: the credential a replica of a workload with an identity gets in its environment. It
// acts as that identity and lives as long as the replica runs: the runtime stores its SHA-256 when
// the replica starts and deletes it when the replica stops. The token is 256 random bits, so a
// plain hash suffices (as for service-account keys); the prefix tells it apart from a key or a JWT.
import { createHash, randomBytes } from 'node:crypto';

const PREFIX = 'keelwl_';

export function mintReplicaToken(): { token: string; tokenHash: string } {
  const token = PREFIX + randomBytes(32).toString('base64url');
  return { token, tokenHash: replicaTokenHash(token) };
}

export function isReplicaToken(token: string): boolean {
  return token.startsWith(PREFIX) && /^[A-Za-z0-9_-]{43}$/.test(token.slice(PREFIX.length));
}

export function replicaTokenHash(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}
