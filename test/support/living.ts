// A Keel whose reconcilers run (fast steps), with the GVC `prod` placed in two locations: where
// the tests of living resources watch status move.
import assert from 'node:assert/strict';
import { startKeel, type Backend, type TestKeel } from './keel.js';

export const STEP = 40;
export const W1 = 'aws-us-west-2';
export const W2 = 'aws-us-east-1';

export async function startLivingKeel(backend: Backend): Promise<TestKeel> {
  const k = await startKeel(backend, 'acme', { reconcile: true, reconcileStepMs: STEP });
  const gvc = await k.call('POST', '/org/acme/gvc', { name: 'prod', spec: { staticPlacement: { locationLinks: [`//location/${W1}`, `//location/${W2}`] } } });
  assert.equal(gvc.status, 201, JSON.stringify(gvc.body));
  return k;
}
