import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import { chainHash } from '../../audit/chain.js';
import { LOOKUP_CATCH_UP, ORG_SPAN } from './lookup.js';
import { sealNew } from './seals.js';

// Work that would stall every request if it ran on the main thread runs in a worker thread with
// its own connection (the events file, with the lookup file attached):
// - WAL checkpoints copy committed pages into the database file and sync it. A PASSIVE checkpoint
//   never blocks the writer, but under steady writes it never catches up either, and the WAL only
//   starts over once it has: it would grow without end (hundreds of MB a minute). So when the log
//   holds more than `restartFrames` and is still growing, a RESTART checkpoint takes the write lock
//   for the little a passive pass left and makes the next commit write from the start of the file
//   again. Under writes that never pause, the lock would seldom be free when the checkpoint looks
//   for it, so the thread raises a flag the writer reads between batches (writerTurn): the writer
//   lets the checkpoint have the lock, and waits for it without blocking its thread.
// - Audit events are sealed (see seals.ts; the write of their hashes takes the lock the same way)
//   and their lookups (see lookup.ts) caught up every `lookupEveryMs`, and whenever the store asks
//   before an audit read.
// sealNew and chainHash are sent as their source text (they use only their arguments and `hash`).
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const { hash } = require('node:crypto');
const chainHash = ${chainHash.toString()};
const sealNew = ${sealNew.toString()};
const Database = require(workerData.driver);
const db = new Database(workerData.file);
const BUSY_TIMEOUT_MS = 5000;
db.pragma(\`busy_timeout = \${BUSY_TIMEOUT_MS}\`);
db.prepare('ATTACH ? AS lookup').run(workerData.lookupFile);
// Derived data (rebuilt from the events when it is lost): no sync at each catch-up's commit.
db.pragma('lookup.synchronous = NORMAL');
// Seals are committed as the writer commits (a checkpoint syncs them), so the writer never waits
// on a sync of this thread's.
db.pragma('main.synchronous = NORMAL');
// Checkpoints run on this thread's timer only, never inside a seal's commit (the writer waits for that).
db.pragma('wal_autocheckpoint = 0');
const statements = workerData.catchUp.map((sql) => db.prepare(sql));
const transaction = db.transaction(() => { for (const s of statements) s.run(); });
const wantsLock = new Int32Array(workerData.wantsLock);
const pause = new Int32Array(new SharedArrayBuffer(4));
const busy = (err) => String(err.code).startsWith('SQLITE_BUSY');
// With the flag up the writer stops at its next batch; this thread, without a busy handler (whose
// sleeps grow to tens of ms), runs \`got\` every 0.2 ms until it reports the lock was had (true) or
// \`ms\` have passed; it returns what \`got\` last returned.
const withWriterStopped = (ms, got) => {
  Atomics.store(wantsLock, 0, 1);
  db.pragma('busy_timeout = 0');
  try {
    const until = Date.now() + ms;
    for (;;) {
      const had = got();
      if (had || Date.now() >= until) return had;
      Atomics.wait(pause, 0, 0, 0.2);
    }
  } finally {
    db.pragma(\`busy_timeout = \${BUSY_TIMEOUT_MS}\`);
    Atomics.store(wantsLock, 0, 0);
    Atomics.notify(wantsLock, 0);
  }
};
// A checkpoint that does not get the lock in its turn is left for the next one.
const restart = () => withWriterStopped(workerData.restartTurnMs, () => !db.pragma('main.wal_checkpoint(RESTART)')[0].busy);
// A seal must be written: it waits for the lock as long as the writer's own busy timeout would.
const sealWrite = (fn) => {
  const written = withWriterStopped(BUSY_TIMEOUT_MS, () => {
    try { db.exec('BEGIN IMMEDIATE'); } catch (err) { if (busy(err)) return false; throw err; }
    try { fn(); db.exec('COMMIT'); } catch (err) { db.exec('ROLLBACK'); throw err; }
    return true;
  });
  if (!written) throw Object.assign(new Error('no write lock for the audit seals'), { code: 'SQLITE_BUSY' });
};
const seal = { span: workerData.span, chainHash, write: sealWrite };
// Another process's thread (the keel command's) may catch up at the same time: its commit makes
// this one's snapshot stale, and the catch-up is simply run again.
const catchUp = () => {
  for (let attempt = 1; ; attempt++) {
    try { sealNew(db, seal); return transaction(); } catch (err) { if (attempt >= 5 || !busy(err)) throw err; }
  }
};
const report = (err) => parentPort.postMessage({ error: String(err) });
let previous = 0;
const checkpoints = setInterval(() => {
  try {
    const [{ log }] = db.pragma('main.wal_checkpoint(PASSIVE)');
    // Only while writes go on: a log that stopped growing starts over at the next write by itself.
    if (log > workerData.restartFrames && log !== previous) restart();
    previous = log;
  } catch (err) { report(err); }
}, workerData.everyMs);
const lookups = setInterval(() => { try { catchUp(); } catch (err) { report(err); } }, workerData.lookupEveryMs);
parentPort.on('message', (message) => {
  if (message.caughtUp !== undefined) {
    let error;
    try { catchUp(); } catch (err) { error = String(err); }
    parentPort.postMessage({ caughtUp: message.caughtUp, error });
    return;
  }
  clearInterval(checkpoints);
  clearInterval(lookups);
  db.close();
  parentPort.close();
});
`;

/** Atomics.waitAsync (Node 16+), which TypeScript's ES2023 library does not declare. */
interface AtomicsWaitAsync {
  waitAsync(array: Int32Array, index: number, value: number, timeoutMs: number): { async: false; value: string } | { async: true; value: Promise<string> };
}

export interface HousekeeperOptions {
  everyMs: number;
  restartFrames: number;
  /** How long a RESTART checkpoint keeps the writer waiting, at most, for the lock to be its. */
  restartTurnMs: number;
  lookupFile: string;
  lookupEveryMs: number;
}

export class Housekeeper {
  private readonly worker: Worker;
  private readonly waiting = new Map<number, { resolve: () => void; reject: (error: Error) => void }>();
  private requests = 0;
  /** Why the thread is gone, once it is: catch-ups asked of it then fail at once instead of waiting forever. */
  private gone?: Error;
  private readonly exited: Promise<unknown>;
  /** 1 while the thread wants or holds the write lock, for a RESTART checkpoint or a seal (see writerTurn). */
  private readonly wantsLock = new Int32Array(new SharedArrayBuffer(4));
  /** The catch-up under way, and the one that callers during it share, which starts after it. */
  private current?: Promise<void>;
  private following?: Promise<void>;
  /** Set by stop(): the thread stays referenced until it exits, whatever answers arrive meanwhile. */
  private stopping = false;

  constructor(file: string, options: HousekeeperOptions, onError: (message: string) => void) {
    const driver = createRequire(import.meta.url).resolve('better-sqlite3');
    this.worker = new Worker(WORKER_SOURCE, { eval: true, workerData: { file, driver, catchUp: LOOKUP_CATCH_UP, span: ORG_SPAN, wantsLock: this.wantsLock.buffer, ...options } });
    this.worker.on('message', (message: { caughtUp?: number; error?: string }) => {
      const waiter = message.caughtUp === undefined ? undefined : this.waiting.get(message.caughtUp);
      if (!waiter) return void onError(message.error ?? 'unknown');
      this.waiting.delete(message.caughtUp!);
      if (this.waiting.size === 0 && !this.stopping) this.worker.unref();
      if (message.error) waiter.reject(new Error(`audit lookup: ${message.error}`));
      else waiter.resolve();
    });
    this.worker.on('error', (err) => {
      onError(String(err));
      this.fail(new Error(`audit lookup: the housekeeping thread failed: ${err.message}`));
    });
    this.exited = new Promise((resolve) => this.worker.once('exit', resolve));
    this.worker.on('exit', () => this.fail(new Error('audit lookup: the housekeeping thread has stopped')));
    this.worker.unref();
  }

  private fail(error: Error): void {
    this.gone ??= error;
    for (const { reject } of this.waiting.values()) reject(this.gone);
    this.waiting.clear();
  }

  /**
   * Resolves at once, or, while the thread wants or holds the write lock, once it is done (at most
   * `maxMs` later): the writer asks before each batch, so the checkpoint or seal gets its turn.
   */
  writerTurn(maxMs: number): Promise<void> | undefined {
    if (Atomics.load(this.wantsLock, 0) === 0) return undefined;
    const wait = (Atomics as unknown as AtomicsWaitAsync).waitAsync(this.wantsLock, 0, 1, maxMs);
    if (!wait.async) return undefined;
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, maxMs); // a pending waitAsync alone would not keep the process alive
      void wait.value.then(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  /** Resolves once every event committed before it was called is sealed and in the lookups. */
  catchUp(): Promise<void> {
    if (this.gone) return Promise.reject(this.gone);
    if (!this.current) {
      const run = this.request();
      const done = () => {
        if (this.current === run) this.current = undefined;
      };
      run.then(done, done);
      return (this.current = run);
    }
    const after = () => {
      this.following = undefined;
      return this.catchUp();
    };
    return (this.following ??= this.current.then(after, after));
  }

  private request(): Promise<void> {
    const id = ++this.requests;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.worker.ref(); // an answer is awaited: the process must not exit first
      this.worker.postMessage({ caughtUp: id });
    });
  }

  /** Stops after any checkpoint or catch-up under way. */
  async stop(): Promise<void> {
    // An unreferenced worker's exit would not keep the process waiting for it: nor may the answer to
    // a catch-up still under way unreference it again, or a process with nothing else to do exits
    // here with the stop unfinished.
    this.stopping = true;
    this.worker.ref();
    this.worker.postMessage('stop');
    await this.exited; // and 'exit' has failed what was still waiting (also when the thread had died before)
  }
}
