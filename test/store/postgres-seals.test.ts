// PostgreSQL's seals: events wait in audit_pending until a seal numbers them, hashes them with the
// keel_chain aggregate (migration 10) and moves them into audit_events; a database made before
// migration 10 keeps its chain.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { chainHash } from '../../src/audit/chain.js';
import { verifyChain } from '../../src/audit/verify.js';
import { migrations } from '../../src/store/migrations.js';
import { PostgresStore } from '../../src/store/postgres/store.js';
import type { Store } from '../../src/store/types.js';
import { forEachBackend, storeFor } from '../support/keel.js';
import { createTestSchema } from '../support/postgres.js';

forEachBackend('PostgreSQL seals', (backend) => {
  let store: Store;
  let db: pg.Client;
  let cleanup: () => Promise<void>;
  before(async () => {
    let url: string | undefined;
    ({ store, url, cleanup } = await storeFor(backend));
    db = new pg.Client({ connectionString: url });
    await db.connect();
  });
  after(async () => {
    await db.end();
    await store.close();
    await cleanup();
  });

  /** Leaves `count` events pending for each org, interleaved, as processes that died before sealing them would. */
  async function leavePending(orgs: string[], count: number): Promise<void> {
    await db.query(
      `INSERT INTO audit_pending (org, id, context, event_time, resource_type, resource_name, resource_id, subject_name, action_type, body)
       SELECT o, gen_random_uuid()::text, 'cpln', now()::text, 'group', 'g' || i, 'r' || i, 'keel', 'edit', json_build_object('org', o, 'n', i, 'text', 'é "' || i)::text
       FROM generate_series(1, $2) i, unnest($1::text[]) o ORDER BY i, o`,
      [orgs, count],
    );
  }

  test('a backlog of more than one batch is chained in the order it was written, each org on its own', async () => {
    await leavePending(['backlog-a', 'backlog-b'], 600); // a seal takes 256 at a time
    const head = await store.auditHead('backlog-a'); // a read seals what is pending first
    assert.equal(head.seq, 600);
    for (const org of ['backlog-a', 'backlog-b']) {
      const events = await store.audit({ org, limit: 1000 });
      assert.deepEqual(events.map((e) => JSON.parse(e.body).n), Array.from({ length: 600 }, (_, i) => i + 1));
      assert.deepEqual(events.map((e) => e.seq), Array.from({ length: 600 }, (_, i) => i + 1));
      let previous = '';
      for (const event of events) {
        assert.equal(event.hash, chainHash(previous, event.seq, event.body), `hash of event ${event.seq}`);
        previous = event.hash;
      }
      assert.deepEqual(await verifyChain(store, org), { ok: true, events: 600, from: 1, to: 600, restores: [] });
    }
    const { rows } = await db.query('SELECT count(*)::int AS n FROM audit_pending');
    assert.equal(rows[0].n, 0);
  });

  test('a seal continues the chain from the head an earlier seal left', async () => {
    await leavePending(['continued'], 3);
    const first = await store.auditHead('continued');
    await leavePending(['continued'], 2);
    const events = await store.audit({ org: 'continued', afterSeq: first.seq, limit: 10 });
    assert.deepEqual(events.map((e) => e.seq), [4, 5]);
    assert.equal(events[0].hash, chainHash(first.hash, 4, events[0].body));
    assert.deepEqual(await verifyChain(store, 'continued'), { ok: true, events: 5, from: 1, to: 5, restores: [] });
  });

  test('the periodic sweep vacuums the queue once seals took events from it', async () => {
    const vacuums = async () =>
      Number((await db.query("SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = 'audit_pending'::regclass")).rows[0].vacuum_count);
    const before = await vacuums();
    await leavePending(['swept'], 50);
    await store.auditHead('swept');
    const deadline = Date.now() + 5000;
    while ((await vacuums()) === before && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 50)); // poll interval, bounded by the deadline
    }
    assert.ok((await vacuums()) > before, 'audit_pending was vacuumed');
  });

  test('a database at schema 9 with sealed and pending events migrates, and its pending events join the same chain', async () => {
    const schema = await createTestSchema();
    const old = new pg.Client({ connectionString: schema.url });
    await old.connect();
    try {
      await old.query('CREATE TABLE keel_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied TEXT NOT NULL)');
      for (const step of migrations.filter((m) => m.version <= 9)) {
        await old.query(step.sql.postgres);
        await old.query('INSERT INTO keel_migrations VALUES ($1, $2, $3)', [step.version, step.name, 'then']);
      }
      let hash = '';
      for (let seq = 1; seq <= 3; seq++) {
        const body = JSON.stringify({ n: seq });
        hash = chainHash(hash, seq, body);
        await old.query(
          `INSERT INTO audit_events (org, seq, id, context, event_time, resource_type, resource_name, resource_id, subject_name, action_type, hash, body)
           VALUES ('o', $1, $2, 'cpln', now()::text, 'gvc', 'g', 'r', 'admin', 'edit', $3, $4)`,
          [seq, `sealed-${seq}`, hash, body],
        );
      }
      await old.query("INSERT INTO audit_heads VALUES ('o', 3, $1)", [hash]);
      // Left pending by the Keel that made this database, in the order its writers committed them.
      for (const n of [4, 5]) {
        await old.query(
          `INSERT INTO audit_pending (org, id, context, event_time, resource_type, resource_name, resource_id, subject_name, action_type, body)
           VALUES ('o', $1, 'cpln', now()::text, 'gvc', 'g', 'r', 'admin', 'edit', $2)`,
          [`pending-${n}`, JSON.stringify({ n })],
        );
      }
    } finally {
      await old.end();
    }
    const migrated = await PostgresStore.open(schema.url);
    try {
      const events = await migrated.audit({ org: 'o', limit: 10 });
      assert.deepEqual(events.map((e) => [e.seq, e.id]), [[1, 'sealed-1'], [2, 'sealed-2'], [3, 'sealed-3'], [4, 'pending-4'], [5, 'pending-5']]);
      assert.deepEqual(await verifyChain(migrated, 'o'), { ok: true, events: 5, from: 1, to: 5, restores: [] });
    } finally {
      await migrated.close();
      await schema.drop();
    }
  });
}, ['postgres']);
