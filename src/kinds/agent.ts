import { defineKind, standardPermissions } from './define.js';
import { anyObject, readOnly } from './schema.js';

// Public types: an agent has no spec; its status carries the bootstrap configuration.
export default defineKind({
  kind: 'agent',
  scope: 'org',
  summary: 'A connector running inside a private network that lets workloads reach endpoints there.',
  fields: {
    status: readOnly(anyObject()),
  },
  permissions: standardPermissions('agents', [{ name: 'use', description: 'Refer to the agent from identities' }]),
  implied: { use: ['view'] },
});
