// Requests exactly as the Terraform provider's client sends them (docs/terraform.md), where they
// differ from what the CLI sends: org logging and tracing through PATCH /org/{org}/ (trailing
// slash) with $replace/ directives, a key dropped with $drop/keys, a GVC query without a body.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { forEachBackend, startKeel, type TestKeel } from '../support/keel.js';

forEachBackend('requests as the Terraform provider sends them', (backend) => {
  let k: TestKeel;
  before(async () => {
    k = await startKeel(backend, 'acme');
  });
  after(() => k.close());

  const datadog = (host: string) => ({ datadog: { host, credentials: '/org/acme/secret/dd' } });

  test('cpln_org_logging and cpln_org_tracing: $replace/logging, $replace/extraLogging, $replace/tracing', async () => {
    const set = await k.call('PATCH', '/org/acme/', {
      spec: { '$replace/logging': datadog('http-intake.logs.datadoghq.com'), '$replace/extraLogging': [datadog('http-intake.logs.us3.datadoghq.com'), datadog('http-intake.logs.datadoghq.eu')] },
    });
    assert.equal(set.status, 200);
    assert.deepEqual(set.body.spec.logging, datadog('http-intake.logs.datadoghq.com'));
    assert.deepEqual(set.body.spec.extraLogging, [datadog('http-intake.logs.us3.datadoghq.com'), datadog('http-intake.logs.datadoghq.eu')]);
    // One logging provider left: extraLogging replaced by an empty list, then removed with null.
    const one = await k.call('PATCH', '/org/acme/', { spec: { '$replace/logging': datadog('http-intake.logs.datadoghq.com'), '$replace/extraLogging': [] } });
    assert.deepEqual(one.body.spec.extraLogging, []);
    const none = await k.call('PATCH', '/org/acme/', { spec: { '$replace/logging': null, '$replace/extraLogging': null } });
    assert.equal(none.status, 200);
    assert.equal(none.body.spec.logging, undefined);
    assert.equal(none.body.spec.extraLogging, undefined);
    const tracing = await k.call('PATCH', '/org/acme/', { spec: { '$replace/tracing': { sampling: 50, provider: { otel: { endpoint: 'collector:4317' } } } } });
    assert.equal(tracing.status, 200);
    assert.equal(tracing.body.spec.tracing.sampling, 50);

    // Misuse: more providers than allowed, and a $replace/ the kind does not allow elsewhere.
    const tooMany = await k.call('PATCH', '/org/acme/', { spec: { '$replace/extraLogging': [1, 2, 3, 4].map((n) => datadog(`${n}.example.com`)) } });
    assert.equal(tooMany.status, 400);
    assert.equal((await k.call('GET', '/org/acme')).body.version, tracing.body.version, 'nothing changed');
    assert.equal((await k.call('PATCH', '/org/acme/group/viewers', { '$replace/memberLinks': [] })).status, 400);
  });

  test('cpln_service_account_key: -addKey, then $drop/keys by the key name', async () => {
    assert.equal((await k.call('POST', '/org/acme/serviceaccount', { name: 'tf' })).status, 201);
    const added = await k.call('POST', '/org/acme/serviceaccount/tf/-addKey', { description: 'terraform' });
    assert.ok([200, 201, 202].includes(added.status));
    const name = added.body.name as string;
    assert.equal((await k.call('GET', '/org/acme/gvc', undefined, { token: added.body.key })).status, 200);
    const dropped = await k.call('PATCH', '/org/acme/serviceaccount/tf', { '$drop/keys': [name] });
    assert.equal(dropped.status, 200);
    assert.deepEqual(dropped.body.keys ?? [], []);
    assert.equal((await k.call('GET', '/org/acme/gvc', undefined, { token: added.body.key })).status, 401, 'the dropped key no longer works');
  });

  test('data source cpln_gvc list: POST -query without a body', async () => {
    assert.equal((await k.call('POST', '/org/acme/gvc', { name: 'g1' })).status, 201);
    const q = await k.call('POST', '/org/acme/gvc/-query');
    assert.equal(q.status, 200);
    assert.deepEqual(q.body.items.map((g: any) => g.name), ['g1']);
  });
});
