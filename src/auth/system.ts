import type { ViewFilter } from './authorizer.js';
import { PolicyAuthorizer } from './policies.js';
import type { Principal } from './principal.js';

/** Keel's own principal, for the local `keel` admin commands (they run with the database's rights). */
export const SYSTEM_PRINCIPAL: Principal = { org: '', kind: 'serviceaccount', name: 'keel', link: '/keel' };

/**
 * Grants every request (access reports still describe the org's real policies). Used only by
 * local admin commands, which already hold the database; never behind an HTTP listener.
 */
export class SystemAuthorizer extends PolicyAuthorizer {
  override requireMember(): void {}
  override check(): void {}
  override async viewFilter(): Promise<ViewFilter> {
    return null;
  }
}
