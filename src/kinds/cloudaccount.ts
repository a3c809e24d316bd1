import { ApiError } from '../errors.js';
import { defineKind, standardPermissions } from './define.js';
import { linksAt } from './references.js';
import { anyObject, immutable, link, obj, oneOf, readOnly, str } from './schema.js';

// Public types: provider plus one configuration object whose fields depend on the provider.
export const CLOUD_ACCOUNT_PROVIDERS = ['aws', 'gcp', 'azure', 'ngs'] as const;

const FIELD_BY_PROVIDER: Record<string, string> = { aws: 'roleArn', gcp: 'projectId', azure: 'secretLink', ngs: 'secretLink' };

export default defineKind({
  kind: 'cloudaccount',
  scope: 'org',
  summary: 'A link to an account at a cloud provider that identities use to obtain cloud access.',
  fields: {
    provider: immutable(oneOf(CLOUD_ACCOUNT_PROVIDERS)),
    data: obj({ roleArn: str({ maxLength: 2048 }), projectId: str({ maxLength: 128 }), secretLink: link() }),
    status: readOnly(anyObject()),
  },
  required: ['provider'],
  permissions: standardPermissions('cloud accounts', [{ name: 'use', description: 'Refer to the cloud account from identities' }]),
  implied: { use: ['view'] },
  // Keel connects to no cloud: an account is usable as declared, last checked when it last changed.
  derivedStatus: (item) => ({ usable: true, lastChecked: item.lastModified }),
  references: (item) => linksAt(item, [{ at: 'data.secretLink', kind: 'secret', permission: 'use' }]),
  check(item) {
    const data = (item.data ?? {}) as Record<string, unknown>;
    const wanted = FIELD_BY_PROVIDER[String(item.provider)];
    for (const key of Object.keys(data)) {
      if (key !== wanted) {
        throw ApiError.badRequest(`data.${key} does not apply to ${String(item.provider)} cloud accounts (use data.${wanted})`, [
          { path: `data.${key}`, message: `is not a field of ${String(item.provider)} cloud accounts` },
        ]);
      }
    }
  },
});
