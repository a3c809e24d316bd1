import { randomUUID } from 'node:crypto';
import type { NewAuditEvent, StoredItem } from '../../src/store/types.js';

/** A stored item as the store's own tests write one: a secret in org `o`, created now, unless `extra` says otherwise. */
export function storedItem(name: string, extra: Partial<StoredItem> = {}): StoredItem {
  const now = new Date().toISOString();
  return { org: 'o', kind: 'secret', gvc: '', name, id: randomUUID(), version: 1, created: now, lastModified: now, data: { name, tags: {} }, ...extra };
}

type EventFields = Omit<NewAuditEvent, 'body' | 'seq'>;

/** An audit event whose body, like a real one's, holds its fields where an event's JSON has them. */
export function auditEvent(fields: EventFields, extra: Record<string, unknown> = {}): NewAuditEvent {
  const body = {
    id: fields.id,
    eventTime: fields.eventTime,
    context: { org: fields.org, name: fields.context },
    subject: { name: fields.subjectName },
    action: { type: fields.actionType },
    resource: { id: fields.resourceId, name: fields.resourceName, type: fields.resourceType },
    ...extra,
  };
  return { ...fields, body: JSON.stringify(body) };
}
