import { createHash } from 'node:crypto';
import { defineKind, standardPermissions } from './define.js';
import { obj, readOnly, str } from './schema.js';

// Public types: an agent has no spec; its status carries the bootstrap configuration.
export default defineKind({
  kind: 'agent',
  scope: 'org',
  summary: 'A connector running inside a private network that lets workloads reach endpoints there.',
  fields: {
    // What the agent needs to register, there from the create response on (Terraform's
    // cpln_agent keeps it as user_data from that response).
    status: readOnly(
      obj({
        bootstrapConfig: obj({ registrationToken: str(), agentId: str(), agentLink: str(), protocolVersion: str(), hubEndpoint: str() }, { additionalProperties: true }),
        protocolVersion: str(),
      }),
    ),
  },
  permissions: standardPermissions('agents', [{ name: 'use', description: 'Refer to the agent from identities' }]),
  implied: { use: ['view'] },
  derivedStatus(item) {
    const org = item.links.find((l) => l.rel === 'org')?.href ?? '';
    const bootstrapConfig = {
      // What the agent presents when it registers (Keel runs no agent hub: nothing checks it).
      registrationToken: createHash('sha256').update(`keel-agent-registration\u0000${item.id}`).digest('base64url'),
      agentId: item.id,
      agentLink: `${org}/agent/${item.name}`,
      protocolVersion: 'v1',
      hubEndpoint: `https://agents.keel.local${org.slice('/org'.length)}`,
    };
    return { bootstrapConfig, protocolVersion: 'v1' };
  },
});
