import { defineKind } from './define.js';
import { anyObject, readOnly, str } from './schema.js';

// Commands are requests for an action on a workload or volume set (run a cron job now, stop a
// replica, expand a volume); the server runs them and reports progress in status.
export default defineKind({
  kind: 'command',
  scope: 'org',
  summary: 'An asynchronous action requested on a workload or volume set, with its progress in status.',
  fields: {
    type: str({ maxLength: 64 }),
    spec: anyObject(),
    lifecycleStage: readOnly(str()),
    status: readOnly(anyObject()),
  },
  permissions: [
    { name: 'create', description: 'Request new commands' },
    { name: 'manage', description: 'Full access' },
    { name: 'view', description: 'Read-only access' },
  ],
});
