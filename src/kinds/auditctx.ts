import { refuseBuiltinDelete, refuseBuiltinUpdate } from './builtin.js';
import { defineKind } from './define.js';
import { anyObject, oneOf, readOnly } from './schema.js';

// api-semantics §11.2: audit contexts collect audit events; the built-in `cpln` receives the
// platform's own events. No audit context can be deleted.
export default defineKind({
  kind: 'auditctx',
  scope: 'org',
  summary: 'An audit context: a named stream of audit events (the built-in cpln context records every platform change).',
  fields: {
    origin: readOnly(oneOf(['default', 'builtin'])),
    status: readOnly(anyObject()),
  },
  permissions: [
    { name: 'create', description: 'Create new audit contexts' },
    { name: 'edit', description: 'Modify existing audit contexts' },
    { name: 'manage', description: 'Full access' },
    { name: 'readAudit', description: 'Read the audit events of the context' },
    { name: 'view', description: 'Read-only access' },
    { name: 'writeAudit', description: 'Write audit events into the context' },
  ],
  implied: { readAudit: ['view'], writeAudit: ['view'] },
  operations: { delete: 'audit contexts cannot be deleted' },
  defaults(item) {
    item.origin ??= 'default';
  },
  check(_item, _ctx, previous) {
    refuseBuiltinUpdate(previous);
  },
  beforeDelete(item) {
    refuseBuiltinDelete(item);
  },
});
