// A workload's header filters are the workload owner's regular expressions, run by the ingress on
// every request: a pattern that backtracks catastrophically on the usual engine (`(a+)+$` against
// a long run of `a` and one `b`) is answered at once on the linear-time one, so no tenant's pattern
// stalls the ingress (on the usual engine this test would not finish).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { externalRefusal } from '../../src/runtime/firewall.js';

test('a catastrophic pattern against a long header is decided at once, and still decides right', () => {
  const config = { external: { inboundAllowCIDR: ['0.0.0.0/0'], http: { inboundHeaderFilter: [{ key: 'x-team', allowedValues: ['(a+)+'] }] } } };
  const refused = externalRefusal(config, '127.0.0.1', { 'x-team': `${'a'.repeat(50_000)}b` }, "workload 'w'");
  assert.match(refused ?? '', /x-team header matches its allowedValues/);
  assert.equal(externalRefusal(config, '127.0.0.1', { 'x-team': 'a'.repeat(50_000) }, "workload 'w'"), undefined);
});
