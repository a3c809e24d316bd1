import { randomUUID } from 'node:crypto';
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
        bootstrapConfig: obj({ agentId: str(), agentLink: str(), protocolVersion: str(), hubEndpoint: str() }, { additionalProperties: true }),
      }),
    ),
  },
  // The bootstrap configuration exists from the create on: `cpln agent create` prints it from the
  // create's answer (the reconciler keeps it).
  defaults(item, place) {
    item.status ??= { bootstrapConfig: bootstrapConfig(place.org, String(item.name), randomUUID()) };
  },
  permissions: standardPermissions('agents', [{ name: 'use', description: 'Refer to the agent from identities' }]),
  implied: { use: ['view'] },
});

/** What an agent needs to register with the hub. */
export function bootstrapConfig(org: string, name: string, agentId: string): Record<string, string> {
  return { agentId, agentLink: `/org/${org}/agent/${name}`, protocolVersion: 'v1', hubEndpoint: `https://agents.keel.local/${org}` };
}
