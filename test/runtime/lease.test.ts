// Two Keel processes on one PostgreSQL database, both with the runc runtime: one of them runs
// the replicas (the holder of the database lease), never both; when it stops, the other takes over.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { startKeel, type TestKeel } from '../support/keel.js';
import { postgresAvailable } from '../support/postgres.js';
import { busyboxImage, leftovers, NOTHING_LEFT, runtimeMissing } from '../support/runtime.js';
import { createGvc, LOCATION, runcSettings } from '../support/runtime-keel.js';
import { waitFor } from '../support/wait.js';
import type { App } from '../../src/server/app.js';

const skip = runtimeMissing() || (!(await postgresAvailable()) && 'PostgreSQL is not reachable');
const octet = (process.pid % 200) + 20;

describe('two Keels on one PostgreSQL never run the same replica', { skip }, () => {
  let keel: TestKeel;
  let second: { app: App };
  let work: string;
  let otherDir: string;

  before(async () => {
    work = mkdtempSync(join(tmpdir(), 'keel-runtime-lease-'));
    otherDir = mkdtempSync(join(tmpdir(), 'keel-runtime-lease-second-'));
    keel = await startKeel('postgres', 'acme', { ...runcSettings(), runtimeSubnet: `10.214.${octet}.0/24` });
    second = await keel.reopen({ dataDir: otherDir, runtimeSubnet: `10.215.${octet}.0/24` });
  });
  after(async () => {
    await keel?.close().catch(() => undefined);
    rmSync(work, { recursive: true, force: true });
    rmSync(otherDir, { recursive: true, force: true });
  });

  test('the lease holder runs the replicas; the other takes over when it stops', async () => {
    const image = busyboxImage(work, 'idle', ['/bin/sleep', '3600']);
    await createGvc(keel);
    // Written through the second process: the first still runs it.
    const created = await keel.call('POST', '/org/acme/gvc/web/workload', { name: 'idle', spec: { type: 'standard', containers: [{ name: 'main', image }], defaultOptions: { autoscaling: { minScale: 2 } } } }, { app: second.app });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const status = async () => (await keel.call('GET', `/org/acme/gvc/web/workload/idle/deployment/${LOCATION}`)).body?.status;
    await waitFor('the deployment to be ready', status, (s) => s?.ready === true, 60_000);
    // Ready once a replica serves; the second may still be starting.
    await waitFor('the lease holder to run both replicas', async () => leftovers(keel.config.dataDir).containers, (c) => c.length === 2, 60_000);
    assert.deepEqual(leftovers(otherDir).containers, []);

    await keel.app.core.close();
    assert.deepEqual(leftovers(keel.config.dataDir), NOTHING_LEFT);
    await waitFor('the second Keel to run both replicas', async () => leftovers(otherDir).containers, (c) => c.length === 2, 60_000);
    assert.deepEqual(leftovers(keel.config.dataDir).containers, []);
  });
});
