import { defineKind, standardPermissions } from './define.js';
import { anyObject, link, oneOf, readOnly, str } from './schema.js';

// Public types (types-ts task.ts): an action waiting for a person (an invitation, an approval).
export default defineKind({
  kind: 'task',
  scope: 'org',
  summary: 'A pending action addressed to a person, such as accepting an invitation to the org.',
  fields: {
    type: str({ maxLength: 64 }),
    targetEmail: str({ maxLength: 254 }),
    creatorLink: readOnly(link()),
    context: anyObject(),
    status: readOnly(oneOf(['pending', 'complete', 'canceled'])),
    response: anyObject(),
  },
  permissions: standardPermissions('tasks'),
  defaults(item) {
    item.status ??= 'pending';
  },
});
