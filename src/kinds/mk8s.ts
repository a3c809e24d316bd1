import { defineKind, standardPermissions } from './define.js';
import { newAlias } from './gvc.js';
import { linksAt } from './references.js';
import { anyObject, arr, map, obj, readOnly, str } from './schema.js';

// Managed Kubernetes (public types mk8s*.ts): one provider block, add-ons and a firewall.
// Provider and add-on blocks are large and change often; Keel stores them as sent.

export const MK8S_PROVIDERS = [
  'generic', 'hetzner', 'aws', 'gcp', 'linode', 'oblivus', 'lambdalabs', 'paperspace', 'ephemeral', 'triton', 'azure', 'digitalocean',
] as const;

export default defineKind({
  kind: 'mk8s',
  scope: 'org',
  summary: 'A Kubernetes cluster that the service manages on a chosen provider.',
  fields: {
    alias: readOnly(str()),
    spec: obj(
      {
        version: str({ minLength: 1, maxLength: 32 }),
        provider: obj(Object.fromEntries(MK8S_PROVIDERS.map((p) => [p, anyObject()])), { minProperties: 1, maxProperties: 1 }),
        addOns: anyObject(),
        firewall: arr(
          obj({ sourceCIDR: str({ maxLength: 64 }), description: str({ maxLength: 250 }) }, { required: ['sourceCIDR'] }),
          { maxItems: 100 },
        ),
      },
      { required: ['version', 'provider'] },
    ),
    // Mk8sStatus of the public types; filled by Keel's mk8s reconciler once the cluster is up.
    status: readOnly(
      obj({
        oidcProviderUrl: str(),
        serverUrl: str(),
        homeLocation: str(),
        addOns: map(anyObject()),
      }),
    ),
  },
  required: ['spec'],
  permissions: standardPermissions('clusters', [{ name: 'clusterAdmin', description: 'Administer the Kubernetes cluster itself' }]),
  // The provider credentials the cluster is built with (provider blocks are stored as sent, so their links may be relative).
  references: (item) =>
    linksAt(item, [
      ...['digitalocean', 'hetzner', 'lambdalabs', 'linode', 'oblivus', 'paperspace'].map((p) => `spec.provider.${p}.tokenSecretLink`),
      'spec.provider.azure.sdkSecretLink',
      'spec.provider.gcp.saKeyLink',
      'spec.provider.triton.connection.privateKeySecretLink',
    ].map((at) => ({ at, kind: 'secret', permission: 'use' }))),
  defaults(item) {
    // The cluster's alias names it in kubeconfigs and host names; set once, kept on every change.
    if (typeof item.alias !== 'string' || item.alias === '') item.alias = newAlias();
    item.status ??= {};
  },
});
