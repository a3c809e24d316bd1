// Crash safety, bounded: a few SIGKILLs of a real `keel serve` under write load per backend (the
// long run is `npm run crash`, scripts/crash.ts). After each restart every acknowledged write is
// there at least at its acknowledged version, every item validates and carries its version's data,
// each change has exactly its audit event and the audit chain verifies; with two processes on one
// PostgreSQL, the surviving one answers every request while the other is down.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runCrash, type Scenario } from '../../scripts/crash.js';
import { postgresAvailable } from '../support/postgres.js';

const pgUp = await postgresAvailable();
const CYCLES = Number(process.env.CRASH_TEST_CYCLES ?? 2);

for (const scenario of ['sqlite', 'postgres', 'two-postgres'] as Scenario[]) {
  test(`SIGKILL under write load loses no acknowledged write and leaves nothing half-written [${scenario}]`, { skip: scenario !== 'sqlite' && !pgUp ? 'PostgreSQL is not reachable' : false }, async () => {
    const report = await runCrash({ scenario, cycles: CYCLES, workers: 6, loadMs: [250, 900], minWritesPerCycle: 20 });
    assert.equal(report.cycles, CYCLES);
    // The run did real work: writes were acknowledged before the kills and checked after them.
    assert.ok(report.acknowledged >= 20 * CYCLES, `only ${report.acknowledged} acknowledged writes`);
    assert.ok(report.patches > 0 && report.creates > 0, JSON.stringify(report));
    assert.ok(report.auditEvents >= report.acknowledged, JSON.stringify(report));
    if (scenario === 'two-postgres') assert.ok(report.servedBySurvivor > 0, 'the surviving process served nothing while the other was down');
  });
}
