// The RESTART turn (src/store/sqlite/housekeeper.ts): when the WAL has outgrown its limit and the
// writer holds the lock, the housekeeping thread raises a flag; the writer, which asks writerTurn()
// before each batch, waits until the checkpoint has had the lock and the log has started over.
// The first test is the thread's side of it, the second the store's. The third stops the thread
// while a catch-up is under way, as closing a store does.
import assert from 'node:assert/strict';
import Database from 'better-sqlite3';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';
import { Housekeeper } from '../../src/store/sqlite/housekeeper.js';
import { lookupFileOf } from '../../src/store/sqlite/lookup.js';
import { SqliteStore } from '../../src/store/sqlite/store.js';
import { storedItem } from '../support/items.js';

const PAGE = Buffer.alloc(4000, 7);

/** Frames in the WAL (committed), as a passive checkpoint reports them. */
const walFrames = (db: Database.Database) => (db.pragma('wal_checkpoint(PASSIVE)') as Array<{ log: number }>)[0].log;

/** The turn writerTurn() hands out once the thread wants the lock (it raises its flag on its own schedule); wrapped, so awaiting this does not await the turn. */
async function turnWhenAsked(housekeeper: Housekeeper, maxMs: number): Promise<{ turn: Promise<void> }> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const turn = housekeeper.writerTurn(maxMs);
    if (turn) return { turn };
    assert.ok(Date.now() < deadline, 'the housekeeping thread never asked for the write lock');
    await new Promise((resolve) => setImmediate(resolve));
  }
}

test('a RESTART checkpoint gets its turn from a writer that holds the lock, and the WAL starts over', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'keel-turn-'));
  const file = join(dir, 'keel.db');
  await new SqliteStore(file).close(); // the schema the thread's catch-up statements need
  const writer = new Database(file);
  writer.pragma('wal_autocheckpoint = 0');
  writer.exec('CREATE TABLE filler (x BLOB)');
  const insert = writer.prepare('INSERT INTO filler VALUES (?)');
  writer.transaction(() => {
    for (let i = 0; i < 40; i++) insert.run(PAGE);
  })();
  assert.ok(walFrames(writer) > 20);
  // The writer holds the lock, as it does while a batch runs.
  writer.exec('BEGIN IMMEDIATE');
  insert.run(PAGE);
  const errors: string[] = [];
  const housekeeper = new Housekeeper(
    file,
    { everyMs: 5, restartFrames: 10, restartTurnMs: 60_000, lookupFile: lookupFileOf(file), lookupEveryMs: 3_600_000 },
    (message) => errors.push(message),
  );
  try {
    const { turn } = await turnWhenAsked(housekeeper, 60_000);
    let done = false;
    void turn.then(() => (done = true));
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(done, false, 'the turn ended while the writer still held the lock');
    // The batch commits; the writer then waits for its turn, as drain() does.
    writer.exec('COMMIT');
    await turn;
    // RESTART finished: the next commit writes from the start of the log again.
    insert.run(PAGE);
    assert.ok(walFrames(writer) <= 3, `the WAL did not start over: ${walFrames(writer)} frames`);
    assert.equal(housekeeper.writerTurn(60_000), undefined, 'the flag stayed up after the checkpoint');
    assert.deepEqual(errors, []);
  } finally {
    await housekeeper.stop();
    writer.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("the store's writer holds its next batch while the thread's flag is up, and no longer than its longest wait", { timeout: 30_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'keel-turn-'));
  const store = new SqliteStore(join(dir, 'keel.db'));
  // The flag the thread raises (it raises none itself here: the WAL is far below its limit, and no event waits for its seal).
  const flag = store['housekeeper']!['wantsLock'];
  const lower = () => {
    Atomics.store(flag, 0, 0);
    Atomics.notify(flag, 0);
  };
  try {
    Atomics.store(flag, 0, 1);
    const order: string[] = [];
    const write = store.transaction((tx) => tx.insert(storedItem('waits'))).then(() => order.push('committed'));
    // Well inside the writer's longest wait (200 ms), which also counts from a later turn of the event loop.
    setTimeout(() => {
      order.push('flag lowered');
      lower();
    }, 20);
    await write;
    assert.deepEqual(order, ['flag lowered', 'committed']);
    // A flag that stays up (a thread stuck in its checkpoint) delays the writer, and does not stop it.
    Atomics.store(flag, 0, 1);
    await store.transaction((tx) => tx.insert(storedItem('goes-on')));
    assert.ok(await store.get({ org: 'o', kind: 'secret', gvc: '', name: 'goes-on' }));
  } finally {
    lower();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('stopping while a catch-up is under way waits for the thread, in a process with nothing else to keep it running', async () => {
  // In a child process: there, as at the end of a `keel` command or a test file, the thread's
  // reference is all that keeps the process alive until the stop is done.
  const dir = mkdtempSync(join(tmpdir(), 'keel-stop-'));
  const file = join(dir, 'keel.db');
  await new SqliteStore(file).close();
  const script = `
    import { Housekeeper } from ${JSON.stringify(new URL('../../src/store/sqlite/housekeeper.ts', import.meta.url).pathname)};
    import { lookupFileOf } from ${JSON.stringify(new URL('../../src/store/sqlite/lookup.ts', import.meta.url).pathname)};
    const file = ${JSON.stringify(file)};
    const housekeeper = new Housekeeper(file, { everyMs: 3_600_000, restartFrames: 1000, restartTurnMs: 1000, lookupFile: lookupFileOf(file), lookupEveryMs: 3_600_000 }, (message) => console.error(message));
    await housekeeper.catchUp(); // the thread is up and has read the store once
    const caughtUp = housekeeper.catchUp().then(() => 'answered', (err) => err.message);
    await housekeeper.stop();
    console.log('stopped; the catch-up was ' + (await caughtUp));`;
  try {
    // A file, not `-e`: with --input-type=module the thread's own (CommonJS) source would be read as a module too.
    const child = join(dir, 'stop.mts');
    writeFileSync(child, script);
    const run = spawnSync(process.execPath, ['--import', 'tsx', child], { encoding: 'utf8', timeout: 60_000 });
    assert.equal(run.status, 0, `the process ended before the stop was done (exit ${run.status}): ${run.stderr}`);
    assert.match(run.stdout, /^stopped; the catch-up was /m);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
