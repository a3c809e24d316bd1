import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import { LOOKUP_CATCH_UP } from './lookup.js';

// Work that would stall every request if it ran on the main thread runs in a worker thread with
// its own connection (the events file, with the lookup file attached):
// - WAL checkpoints copy committed pages into the database file and sync it. A PASSIVE checkpoint
//   never blocks the writer, but under steady writes it never catches up either, and the WAL only
//   starts over once it has: it would grow without end (hundreds of MB a minute). So when the log
//   holds more than `restartFrames` and is still growing, a RESTART checkpoint takes the write lock
//   for the little a passive pass left and makes the next commit write from the start of the file
//   again. The writer waits for it without blocking its thread (see SqliteStore.drain).
// - Audit lookups (see lookup.ts) are caught up every `lookupEveryMs`, and whenever the store asks
//   before a query that needs them.
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.driver);
const db = new Database(workerData.file);
db.pragma('busy_timeout = 5000');
db.prepare('ATTACH ? AS lookup').run(workerData.lookupFile);
// Derived data (rebuilt from the events when it is lost): no sync at each catch-up's commit.
db.pragma('lookup.synchronous = NORMAL');
const statements = workerData.catchUp.map((sql) => db.prepare(sql));
const transaction = db.transaction(() => { for (const s of statements) s.run(); });
// Another process's thread (the keel command's) may catch up at the same time: its commit makes
// this one's snapshot stale, and the catch-up is simply run again.
const catchUp = () => {
  for (let attempt = 1; ; attempt++) {
    try { return transaction(); } catch (err) { if (attempt >= 5 || !String(err.code).startsWith('SQLITE_BUSY')) throw err; }
  }
};
const report = (err) => parentPort.postMessage({ error: String(err) });
let previous = 0;
const checkpoints = setInterval(() => {
  try {
    const [{ log }] = db.pragma('main.wal_checkpoint(PASSIVE)');
    // Only while writes go on: a log that stopped growing starts over at the next write by itself.
    if (log > workerData.restartFrames && log !== previous) db.pragma('main.wal_checkpoint(RESTART)');
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

export interface HousekeeperOptions {
  everyMs: number;
  restartFrames: number;
  lookupFile: string;
  lookupEveryMs: number;
}

export class Housekeeper {
  private readonly worker: Worker;
  private readonly waiting = new Map<number, { resolve: () => void; reject: (error: Error) => void }>();
  private requests = 0;

  constructor(file: string, options: HousekeeperOptions, onError: (message: string) => void) {
    const driver = createRequire(import.meta.url).resolve('better-sqlite3');
    this.worker = new Worker(WORKER_SOURCE, { eval: true, workerData: { file, driver, catchUp: LOOKUP_CATCH_UP, ...options } });
    this.worker.on('message', (message: { caughtUp?: number; error?: string }) => {
      const waiter = message.caughtUp === undefined ? undefined : this.waiting.get(message.caughtUp);
      if (!waiter) return void onError(message.error ?? 'unknown');
      this.waiting.delete(message.caughtUp!);
      if (this.waiting.size === 0) this.worker.unref();
      if (message.error) waiter.reject(new Error(`audit lookup: ${message.error}`));
      else waiter.resolve();
    });
    this.worker.on('error', (err) => onError(String(err)));
    this.worker.unref();
  }

  /** Resolves once the lookups hold every event committed before it was called. */
  catchUp(): Promise<void> {
    const id = ++this.requests;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.worker.ref(); // an answer is awaited: the process must not exit first
      this.worker.postMessage({ caughtUp: id });
    });
  }

  /** Stops after any checkpoint or catch-up under way. */
  async stop(): Promise<void> {
    const exited = new Promise((resolve) => this.worker.once('exit', resolve));
    this.worker.ref(); // an unreferenced worker's exit would not keep the process waiting for it
    this.worker.postMessage('stop');
    await exited;
    for (const { reject } of this.waiting.values()) reject(new Error('the store is closed'));
    this.waiting.clear();
  }
}
