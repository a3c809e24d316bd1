import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import { overBudget } from '../conflicts.js';
import type { ResourceRow } from '../rows.js';

// Lists, queries and audit reads run in worker threads with read-only connections of their own:
// however long a caller's query runs, or however many events a replay or a history page reads, the
// thread that serves every other request is not held by it. The worker
// stops a statement past its budget: better-sqlite3 has no progress handler, so the statement calls
// keel_within_budget() once per row it looks at, and the function throws once the budget, counted
// from the first row (waiting for a lock does not count), is spent.
/** The list worker thread's nice value: 10 gives it about a tenth of a core the request thread also wants. */
const WORKER_NICE = 10;

const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.driver);
// Below the request thread's priority (Linux: a thread's own nice value): when both want the CPU,
// requests are answered first and queries take the rest.
try {
  const thread = Number(require('node:fs').readlinkSync('/proc/thread-self').split('/').pop());
  require('node:os').setPriority(thread, workerData.nice);
} catch {
  // no /proc (not Linux): the worker runs at the process's priority
}
const db = new Database(workerData.file, { readonly: true });
db.pragma('busy_timeout = 5000');
// Audit reads find events through the lookup file (see lookup.ts), attached as the reader has it.
db.prepare('ATTACH ? AS lookup').run(workerData.lookupFile);
let deadline = 0;
let budget = Infinity;
let spent = false;
db.function('keel_within_budget', { deterministic: false }, () => {
  const now = Date.now();
  if (deadline === 0) deadline = now + budget;
  else if (now > deadline) { spent = true; throw new Error('over budget'); }
  return 1;
});
const statements = new Map();
parentPort.on('message', ({ id, sql, values, budgetMs }) => {
  deadline = 0;
  budget = budgetMs;
  spent = false;
  try {
    let statement = statements.get(sql);
    if (!statement) {
      if (statements.size >= 1000) statements.clear();
      statement = db.prepare(sql);
      statements.set(sql, statement);
    }
    parentPort.postMessage({ id, rows: statement.all(...values) });
  } catch (err) {
    parentPort.postMessage({ id, spent, error: String((err && err.message) || err) });
  }
});
`;

interface Pending {
  budgetMs?: number;
  resolve: (rows: unknown[]) => void;
  reject: (error: Error) => void;
}

/**
 * Worker threads per pool: as many as the default seats of the scheduler's level whose work the pool
 * runs (maxListsInFlight or maxLongReadsInFlight) and its seat for short work (shortReadSeats), so
 * that the statements it lets run at once run side by side, each on its own thread, rather than one
 * behind another in a single thread's line (where a light list would wait out a heavy query's whole
 * budget).
 */
const THREADS_PER_POOL = 3;

/** A pool of list worker threads; each statement goes to the one with the least to do. Threads start when first needed. */
export class ListWorkers {
  private readonly workers: ListWorker[];

  constructor(file: string, lookupFile: string) {
    this.workers = Array.from({ length: THREADS_PER_POOL }, () => new ListWorker(file, lookupFile));
  }

  /** The rows of a statement; with `budgetMs`, a list statement whose WHERE calls keel_within_budget(). */
  all<Row = ResourceRow>(sql: string, values: unknown[], budgetMs?: number): Promise<Row[]> {
    let idlest = this.workers[0];
    for (const worker of this.workers) if (worker.waiting < idlest.waiting) idlest = worker;
    return idlest.all(sql, values, budgetMs);
  }

  async close(): Promise<void> {
    await Promise.all(this.workers.map((worker) => worker.close()));
  }
}

class ListWorker {
  private worker?: Worker;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;

  constructor(
    private readonly file: string,
    private readonly lookupFile: string,
  ) {}

  /** Statements given to this thread and not answered yet. */
  get waiting(): number {
    return this.pending.size;
  }

  /** The rows of a statement, or overBudget() past `budgetMs` (when its WHERE calls keel_within_budget()). */
  all<Row>(sql: string, values: unknown[], budgetMs?: number): Promise<Row[]> {
    const worker = this.started();
    const id = this.nextId++;
    return new Promise<Row[]>((resolve, reject) => {
      this.pending.set(id, { budgetMs, resolve: resolve as (rows: unknown[]) => void, reject });
      worker.ref();
      worker.postMessage({ id, sql, values, budgetMs: budgetMs ?? Infinity });
    });
  }

  private started(): Worker {
    if (this.worker) return this.worker;
    const driver = createRequire(import.meta.url).resolve('better-sqlite3');
    const worker = new Worker(WORKER_SOURCE, { eval: true, workerData: { file: this.file, lookupFile: this.lookupFile, driver, nice: WORKER_NICE } });
    worker.on('message', (message: { id: number; rows?: unknown[]; error?: string; spent?: boolean }) => {
      const waiting = this.pending.get(message.id);
      if (!waiting) return;
      this.pending.delete(message.id);
      if (this.pending.size === 0) worker.unref();
      if (message.rows) waiting.resolve(message.rows);
      else waiting.reject(message.spent && waiting.budgetMs !== undefined ? overBudget(waiting.budgetMs) : new Error(`list statement failed: ${message.error}`));
    });
    // A dead worker fails what it was given; the next list starts another.
    const fail = (err: Error) => {
      if (this.worker === worker) this.worker = undefined;
      for (const waiting of this.pending.values()) waiting.reject(err);
      this.pending.clear();
    };
    worker.on('error', fail);
    worker.on('exit', (code) => fail(new Error(`the list worker exited (${code})`)));
    worker.unref();
    this.worker = worker;
    return worker;
  }

  async close(): Promise<void> {
    const worker = this.worker;
    this.worker = undefined;
    await worker?.terminate();
  }
}
