import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';

// WAL checkpoints copy committed pages into the database file and sync it: slow I/O that would
// stall every request if it ran on the main thread. A worker thread with its own connection
// runs them instead. A PASSIVE checkpoint never blocks the writer, but under steady writes it
// never catches up either, and the WAL only starts over once it has: it would grow without end
// (hundreds of MB a minute). So when the log holds more than `restartFrames` and is still growing,
// a RESTART checkpoint takes the write lock for the little a passive pass left and makes the next
// commit write from the start of the file again. The writer waits for it without blocking its thread
// (see SqliteStore.drain).
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.driver);
const db = new Database(workerData.file);
db.pragma('busy_timeout = 5000');
let previous = 0;
const timer = setInterval(() => {
  try {
    const [{ log }] = db.pragma('wal_checkpoint(PASSIVE)');
    // Only while writes go on: a log that stopped growing starts over at the next write by itself.
    if (log > workerData.restartFrames && log !== previous) db.pragma('wal_checkpoint(RESTART)');
    previous = log;
  } catch (err) { parentPort.postMessage(String(err)); }
}, workerData.everyMs);
parentPort.on('message', () => { clearInterval(timer); db.close(); parentPort.close(); });
`;

export class Checkpointer {
  private readonly worker: Worker;

  constructor(file: string, options: { everyMs: number; restartFrames: number }, onError: (message: string) => void) {
    const driver = createRequire(import.meta.url).resolve('better-sqlite3');
    this.worker = new Worker(WORKER_SOURCE, { eval: true, workerData: { file, driver, ...options } });
    this.worker.on('message', onError);
    this.worker.on('error', (err) => onError(String(err)));
    this.worker.unref();
  }

  /** Stops after any checkpoint under way. */
  async stop(): Promise<void> {
    const exited = new Promise((resolve) => this.worker.once('exit', resolve));
    this.worker.ref(); // an unreferenced worker's exit would not keep the process waiting for it
    this.worker.postMessage('stop');
    await exited;
  }
}
