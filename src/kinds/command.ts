import { defineKind } from './define.js';
import { anyObject, oneOf, readOnly, str } from './schema.js';

/** CommandLifecycleStage of the public types. */
export const COMMAND_STAGES = ['pending', 'running', 'cancellation-requested', 'cancelled', 'completed', 'failed'] as const;

// Commands are requests for an action on a workload or volume set (run a cron job now, stop a
// replica, expand a volume); the server runs them and reports progress in status. They live
// under their parent (…/workload/{w}/-command, …/volumeset/{v}/-command: src/server/subresources.ts).
export default defineKind({
  kind: 'command',
  scope: 'org',
  summary: 'An asynchronous action requested on a workload or volume set, with its progress in status.',
  writtenByService: true,
  fields: {
    type: str({ minLength: 1, maxLength: 64 }),
    spec: anyObject(),
    lifecycleStage: readOnly(oneOf(COMMAND_STAGES)),
    status: readOnly(anyObject()),
  },
  permissions: [
    { name: 'create', description: 'Request new commands' },
    { name: 'manage', description: 'Full access' },
    { name: 'view', description: 'Read-only access' },
  ],
});
