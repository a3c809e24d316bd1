// The change event's JSON is written out by hand (a template): it must be the event a client expects,
// whatever the strings in it hold.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { changeEvent, type Actor } from '../../src/audit/events.js';
import type { Resource } from '../../src/kinds/types.js';

const text = fc.string({ unit: 'grapheme-composite', maxLength: 20 });
const anyText = fc.oneof(text, fc.string({ unit: 'binary', maxLength: 20 }));

test('a change event body parses to the documented envelope for any names, links and addresses', () => {
  fc.assert(
    fc.property(
      fc.record({ name: anyText, type: fc.constantFrom('user', 'serviceaccount', 'keel'), link: fc.option(anyText, { nil: undefined }), requestId: fc.option(anyText, { nil: undefined }), remoteIp: fc.option(anyText, { nil: undefined }) }),
      fc.record({ name: anyText, kind: text, self: fc.option(anyText, { nil: undefined }), tags: fc.dictionary(anyText, anyText, { maxKeys: 3 }) }),
      anyText,
      anyText,
      (actor: Actor, r, action, org) => {
        const resource: Resource = {
          id: 'a1b2',
          kind: r.kind,
          name: r.name,
          version: 3,
          tags: { ...r.tags },
          created: '2026-01-01T00:00:00.000Z',
          lastModified: '2026-01-02T00:00:00.000Z',
          links: r.self === undefined ? [] : [{ rel: 'self', href: r.self }],
        };
        const event = changeEvent(org, actor, action, resource);
        const body = JSON.parse(event.body);
        assert.deepEqual(body, {
          id: event.id,
          eventTime: event.eventTime,
          postedTime: event.eventTime,
          receivedTime: event.eventTime,
          requestId: actor.requestId ?? event.id,
          context: { org, name: 'cpln', eventSource: 'keel', ...(actor.remoteIp ? { remoteIp: actor.remoteIp } : {}) },
          subject: { name: actor.name, data: { type: actor.type, ...(actor.link ? { principalLink: actor.link } : {}) } },
          action: { type: action },
          result: { status: 'success' },
          resource: { id: 'a1b2', name: r.name, type: r.kind, ...(r.self === undefined ? {} : { link: r.self }), version: 3, data: resource },
        });
        assert.deepEqual([event.resourceName, event.resourceType, event.subjectName, event.actionType], [r.name, r.kind, actor.name, action]);
      },
    ),
    { numRuns: 300 },
  );
});
