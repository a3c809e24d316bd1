import { defineKind, standardPermissions } from './define.js';
import { obj, readOnly, str } from './schema.js';

// Public types: an agent has no spec; its status carries the bootstrap configuration.
export default defineKind({
  kind: 'agent',
  scope: 'org',
  summary: 'A connector running inside a private network that lets workloads reach endpoints there.',
  fields: {
    // Written by Keel's agent reconciler on create: what the agent needs to register.
    status: readOnly(
      obj({
        bootstrapConfig: obj({ registrationToken: str(), agentId: str(), agentLink: str(), protocolVersion: str(), hubEndpoint: str() }, { additionalProperties: true }),
        protocolVersion: str(),
      }),
    ),
  },
  permissions: standardPermissions('agents', [{ name: 'use', description: 'Refer to the agent from identities' }]),
  implied: { use: ['view'] },
});
