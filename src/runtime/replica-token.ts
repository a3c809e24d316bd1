// A replica's CPLN_TOKEN (auth/replica-tokens.ts): issued when it starts, when its workload has an
// identity of its GVC, and deleted when it stops. The stored row (its hash only) is what every
// Keel process on the store checks, so a stopped replica's token is refused everywhere.
import { mintReplicaToken } from '../auth/replica-tokens.js';
import { parseLink } from '../resources/links.js';
import type { Store } from '../store/types.js';
import type { DeploymentRef } from './types.js';

/** A new token for the replica `replica` of runtime `scope`, or undefined when its workload has no identity. */
export async function issueReplicaToken(store: Store, scope: string, replica: string, ref: DeploymentRef, spec: Record<string, any>): Promise<string | undefined> {
  const link = typeof spec.identityLink === 'string' ? parseLink(spec.identityLink) : undefined;
  if (!link || link.kind !== 'identity' || link.org !== ref.org || link.gvc !== ref.gvc) return undefined;
  if (!(await store.get({ org: ref.org, kind: 'identity', gvc: ref.gvc, name: link.name }))) return undefined;
  const { token, tokenHash } = mintReplicaToken();
  await store.putReplicaToken({ tokenHash, org: ref.org, gvc: ref.gvc, identity: link.name, scope, replica, created: new Date().toISOString() });
  return token;
}
