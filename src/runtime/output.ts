// Containers' output, taken in on a worker thread so that a replica writing without pause never
// holds the API's event loop. Each container's stdout and stderr are a FIFO the thread reads
// without blocking, every POLL_MS, at most `drainBytesPerSecond` of it (past that, the pipe fills
// and the container's writes wait: a flood costs Keel a bounded share of one core, and no disk).
// Lines are cut at newlines (at most LINE_MAX bytes each) and pass a token bucket per replica of
// `bytesPerSecond` (a second's worth of burst); what does not pass is dropped, and each second with
// drops gives the replica one line saying how much. Lines wait in the thread (at most
// QUEUE_SECONDS of the rate per replica, the rest dropped and counted the same way) until the main
// thread takes a bounded batch to write to the store; batches go round the replicas in turn.
import { Worker } from 'node:worker_threads';

export interface OutputLine {
  org: string;
  labels: Record<string, string>;
  /** When it was read (ms); the writer stamps it. */
  ms: number;
  line: string;
}

export interface OutputOptions {
  bytesPerSecond: number;
  drainBytesPerSecond: number;
  onError: (err: unknown) => void;
}

const POLL_MS = 20;
const LINE_MAX = 16 * 1024;
const QUEUE_SECONDS = 4;
const MARKER_MS = 1_000;

const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const fs = require('node:fs');
const { bytesPerSecond, drainBytesPerSecond, pollMs, lineMax, queueBytes, markerMs } = workerData;
const perPoll = Math.max(4096, Math.ceil((drainBytesPerSecond * pollMs) / 1000));
const chunk = Buffer.alloc(64 * 1024);
/** Open FIFOs by id: { fd, replica, org, labels, rest: Buffer[] , restBytes }. */
const sources = new Map();
/** Per replica: { org, labels, tokens, at, queue: [], queued, droppedBytes, droppedLines, markedAt, forgotten }. */
const replicas = new Map();
const replicaOf = (id, org, labels) => {
  let r = replicas.get(id);
  if (!r) replicas.set(id, (r = { org, labels, tokens: bytesPerSecond, at: Date.now(), queue: [], head: 0, queued: 0, droppedBytes: 0, droppedLines: 0, markedAt: Date.now(), forgotten: false }));
  return r;
};
const text = (buffer) => buffer.toString('utf8').replace(/\\r$/, '').replace(/\\0/g, '\\ufffd');
const enqueue = (r, labels, line, bytes) => {
  r.queue.push({ org: r.org, labels, ms: Date.now(), line, bytes });
  r.queued += bytes;
};
const drop = (r, bytes, lines) => {
  r.droppedBytes += bytes;
  r.droppedLines += lines;
};
/** One line of a source's output: through the replica's bucket, into its queue. */
const offer = (s, buffer) => {
  const r = replicas.get(s.replica);
  const cost = Math.min(buffer.length + 1, bytesPerSecond);
  if (r.tokens < cost || r.queued + cost > queueBytes) return drop(r, buffer.length + 1, 1);
  r.tokens -= cost;
  enqueue(r, s.labels, text(buffer), cost);
};
const refill = (r, now) => {
  r.tokens = Math.min(bytesPerSecond, r.tokens + ((now - r.at) * bytesPerSecond) / 1000);
  r.at = now;
};
const take = (s, data) => {
  let start = 0;
  for (;;) {
    const nl = data.indexOf(10, start);
    if (nl < 0) break;
    let piece = data.subarray(start, nl);
    if (s.restBytes > 0) {
      piece = Buffer.concat([...s.rest, piece]);
      s.rest = [];
      s.restBytes = 0;
    }
    offer(s, piece.length > lineMax ? piece.subarray(0, lineMax) : piece);
    start = nl + 1;
  }
  if (start < data.length) {
    s.rest.push(Buffer.from(data.subarray(start)));
    s.restBytes += data.length - start;
    // A line without end: what it has so far goes as a line of its own.
    if (s.restBytes >= lineMax) flushRest(s);
  }
};
const flushRest = (s) => {
  if (s.restBytes === 0) return;
  const all = Buffer.concat(s.rest);
  s.rest = [];
  s.restBytes = 0;
  for (let i = 0; i < all.length; i += lineMax) offer(s, all.subarray(i, i + lineMax));
};
/** Reads what the source has, up to \`limit\` bytes; true at its end (no writer left). */
const read = (s, limit) => {
  let got = 0;
  while (got < limit) {
    let n;
    try {
      n = fs.readSync(s.fd, chunk, 0, Math.min(chunk.length, limit - got), null);
    } catch (err) {
      if (err.code === 'EAGAIN' || err.code === 'EWOULDBLOCK') return false;
      throw err;
    }
    if (n === 0) return true;
    got += n;
    take(s, chunk.subarray(0, n));
  }
  return false;
};
const mark = (r, now) => {
  if (r.droppedBytes === 0) return;
  const line = 'keel: dropped ' + r.droppedBytes + ' bytes (' + r.droppedLines + ' lines) of output over KEEL_LOG_BYTES_PER_SECOND (' + bytesPerSecond + ' bytes a second)';
  r.queue.push({ org: r.org, labels: r.labels, ms: now, line, bytes: 0 });
  r.droppedBytes = 0;
  r.droppedLines = 0;
  r.markedAt = now;
};
const close = (id) => {
  const s = sources.get(id);
  if (!s) return;
  sources.delete(id);
  try {
    read(s, perPoll * 8);
    flushRest(s);
  } finally {
    fs.closeSync(s.fd);
  }
};
setInterval(() => {
  const now = Date.now();
  for (const r of replicas.values()) refill(r, now);
  for (const [id, s] of sources) {
    try {
      read(s, perPoll);
    } catch (err) {
      parentPort.postMessage({ op: 'error', error: String(err) });
      sources.delete(id);
      try { fs.closeSync(s.fd); } catch {}
    }
  }
  for (const r of replicas.values()) if (now - r.markedAt >= markerMs) mark(r, now);
}, pollMs);
parentPort.on('message', (m) => {
  try {
    if (m.op === 'open') {
      // A replica started again under the same id (a stateful one's new version) is not forgotten.
      replicaOf(m.replica, m.org, m.replicaLabels).forgotten = false;
      const fd = fs.openSync(m.path, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
      sources.set(m.id, { fd, replica: m.replica, labels: m.labels, rest: [], restBytes: 0 });
      parentPort.postMessage({ op: 'reply', request: m.request });
    } else if (m.op === 'own') {
      const r = replicaOf(m.replica, m.org, m.replicaLabels);
      if (m.after !== undefined && sources.has(m.after)) read(sources.get(m.after), perPoll * 8);
      r.queue.push({ org: m.org, labels: m.labels, ms: Date.now(), line: m.line, bytes: 0 });
    } else if (m.op === 'close') {
      close(m.id);
    } else if (m.op === 'forget') {
      const r = replicas.get(m.replica);
      if (r) {
        mark(r, Date.now());
        r.forgotten = true;
        if (r.head >= r.queue.length) replicas.delete(m.replica);
      }
    } else if (m.op === 'take') {
      const lines = [];
      let bytes = 0;
      // Round the replicas in turn, a share at a time, so one with much waiting does not hold back the others.
      const share = Math.max(1, Math.ceil(m.maxLines / Math.max(1, replicas.size)));
      let more = true;
      while (more && lines.length < m.maxLines && bytes < m.maxBytes) {
        more = false;
        for (const [id, r] of replicas) {
          let n = 0;
          while (r.head < r.queue.length && n < share && lines.length < m.maxLines && bytes < m.maxBytes) {
            const entry = r.queue[r.head++];
            r.queued -= entry.bytes;
            lines.push({ org: entry.org, labels: entry.labels, ms: entry.ms, line: entry.line });
            bytes += entry.line.length;
            n++;
          }
          if (r.head >= r.queue.length) {
            r.queue = [];
            r.head = 0;
            r.queued = 0;
            if (r.forgotten) replicas.delete(id);
          } else more = true;
        }
      }
      for (const r of replicas.values()) {
        if (r.head > 1024) {
          r.queue = r.queue.slice(r.head);
          r.head = 0;
        }
      }
      parentPort.postMessage({ op: 'reply', request: m.request, lines, more });
    } else if (m.op === 'stop') {
      for (const id of [...sources.keys()]) close(id);
      parentPort.postMessage({ op: 'reply', request: m.request });
    }
  } catch (err) {
    if (m.request !== undefined) parentPort.postMessage({ op: 'reply', request: m.request, error: String(err) });
    else parentPort.postMessage({ op: 'error', error: String(err) });
  }
});
`;

export class Output {
  private readonly worker: Worker;
  private requests = 0;
  private readonly waiting = new Map<number, { resolve: (m: Reply) => void; reject: (err: Error) => void }>();

  constructor(private readonly options: OutputOptions) {
    this.worker = new Worker(WORKER_SOURCE, {
      eval: true,
      workerData: { bytesPerSecond: options.bytesPerSecond, drainBytesPerSecond: options.drainBytesPerSecond, pollMs: POLL_MS, lineMax: LINE_MAX, queueBytes: options.bytesPerSecond * QUEUE_SECONDS, markerMs: MARKER_MS },
    });
    this.worker.on('message', (m: Reply & { op: string; request?: number }) => {
      if (m.op === 'error') return this.options.onError(new Error(`reading replica output: ${m.error}`));
      const waiter = this.waiting.get(m.request!);
      if (!waiter) return;
      this.waiting.delete(m.request!);
      if (m.error) waiter.reject(new Error(`reading replica output: ${m.error}`));
      else waiter.resolve(m);
    });
    this.worker.on('error', (err) => this.options.onError(err));
    this.worker.unref();
  }

  private ask(message: Record<string, unknown>): Promise<Reply> {
    const request = ++this.requests;
    return new Promise((resolve, reject) => {
      this.waiting.set(request, { resolve, reject });
      this.worker.postMessage({ ...message, request });
    });
  }

  /** Starts reading the FIFO at `path` as a container's output (`labels`) of `replica`; resolves once it is open for reading. */
  async open(id: string, path: string, replica: string, org: string, replicaLabels: Record<string, string>, labels: Record<string, string>): Promise<void> {
    await this.ask({ op: 'open', id, path, replica, org, replicaLabels, labels });
  }

  /** A line of Keel's own about a replica, after what the container `after` wrote so far. */
  own(replica: string, org: string, replicaLabels: Record<string, string>, labels: Record<string, string>, line: string, after?: string): void {
    this.worker.postMessage({ op: 'own', replica, org, replicaLabels, labels, line, after });
  }

  /** The container has stopped: the rest of its output is read and its FIFO closed. */
  close(id: string): void {
    this.worker.postMessage({ op: 'close', id });
  }

  /** The replica is gone: a last count of what it dropped, then nothing more of it. */
  forget(replica: string): void {
    this.worker.postMessage({ op: 'forget', replica });
  }

  /** Up to `maxLines` lines (about `maxBytes`) waiting to be written; `more` when others still wait. */
  async take(maxLines: number, maxBytes: number): Promise<{ lines: OutputLine[]; more: boolean }> {
    const reply = await this.ask({ op: 'take', maxLines, maxBytes });
    return { lines: reply.lines ?? [], more: reply.more ?? false };
  }

  /** Reads what is left of every container and closes their FIFOs; the lines still wait for take(). */
  async closeAll(): Promise<void> {
    await this.ask({ op: 'stop' });
  }

  async stop(): Promise<void> {
    for (const { reject } of this.waiting.values()) reject(new Error('reading replica output: stopped'));
    this.waiting.clear();
    await this.worker.terminate();
  }
}

interface Reply {
  error?: string;
  lines?: OutputLine[];
  more?: boolean;
}
