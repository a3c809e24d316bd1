// The adversarial bench's attack, in a process of its own (forked by adversarial.ts): its loops must
// not delay the unrelated caller's client, which would count the attacker's own event loop as the
// server's latency. Arguments: base URL, org, attack, comma-separated keys (one per hostile principal),
// watch replay period in ms, the LogQL regex's repeat count. Runs until it is sent 'stop', then sends
// back its answers by status and exits.
import { setMaxListeners } from 'node:events';
import { connect, type Socket } from 'node:net';

const [base, org, attack, keyList, replayEveryMs, regexRepeat] = process.argv.slice(2);
const keys = keyList.split(',');

/** What each hostile principal runs at once: two of the costly calls (as many as a careful per-key cap would allow). */
const LOOPS_PER_PRINCIPAL = 2;
/** Slow bodies per principal, and how often each sends one more byte. */
const SLOW_BODIES = 60;
const DRIP_MS = 1000;

const HEAVY_QUERY = JSON.stringify({
  spec: { match: 'any', terms: Array.from({ length: 10 }, (_, i) => ({ op: '~', property: '*', value: `no-such-text-${i}` })) },
});

const stop = new AbortController();
// Every replay round and every call listens on it: thousands over a run, none of them a leak.
setMaxListeners(0, stop.signal);
const answers: Record<string, number> = {};
const tally = (status: number | string) => (answers[status] = (answers[status] ?? 0) + 1);
const auth = (key: string) => ({ authorization: `Bearer ${key}` });

/** Calls `url` again and again until the attack stops. */
async function loop(key: string, url: string, init: RequestInit = {}): Promise<void> {
  while (!stop.signal.aborted) {
    try {
      const res = await fetch(url, { ...init, headers: { ...auth(key), ...(init.headers as Record<string, string>) }, signal: stop.signal });
      await res.arrayBuffer();
      tally(res.status);
    } catch {
      // aborted at the end
    }
  }
}

/** Replays from 0, dropped and opened again every replayEveryMs. */
async function replay(key: string): Promise<void> {
  while (!stop.signal.aborted) {
    const round = AbortSignal.any([stop.signal, AbortSignal.timeout(Number(replayEveryMs))]);
    try {
      const res = await fetch(`${base}/org/${org}/-watch?since=0`, { headers: auth(key), signal: round });
      tally(res.status);
      const reader = res.body?.getReader();
      if (reader) for (;;) if ((await reader.read()).done) break;
    } catch {
      // the round's end (or the attack's) aborted it
    }
  }
}

/** A PATCH whose body comes a byte a second; opened again whenever the server ends it. */
function slowBody(key: string, socketsOpen: Set<Socket>): void {
  if (stop.signal.aborted) return;
  const { host, port } = new URL(base);
  const socket = connect(Number(port), host.replace(/:\d+$/, ''));
  socketsOpen.add(socket);
  let answered = false;
  socket.on('connect', () => socket.write(`PATCH /org/${org}/gvc/g0 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{`));
  socket.on('data', (d) => {
    if (answered) return;
    answered = true;
    tally(/^HTTP\/1\.1 (\d+)/.exec(d.toString())?.[1] ?? 'other');
  });
  socket.on('error', () => {});
  const drip = setInterval(() => socket.writable && socket.write(' '), DRIP_MS);
  socket.on('close', () => {
    clearInterval(drip);
    socketsOpen.delete(socket);
    if (!answered) tally('closed');
    setTimeout(() => slowBody(key, socketsOpen), 100);
  });
}

const HOSTILE_REGEX = `${'.*'.repeat(Number(regexRepeat))}Z`;
const runs: Array<Promise<void>> = [];
const sockets = new Set<Socket>();
for (const key of keys) {
  for (let i = 0; i < LOOPS_PER_PRINCIPAL; i++) {
    if (attack === 'queries') runs.push(loop(key, `${base}/org/${org}/workload/-query`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: HEAVY_QUERY }));
    if (attack === 'history') runs.push(loop(key, `${base}/org/${org}/gvc/g0/workload/w0/-history?limit=1`));
    if (attack === 'replays') runs.push(replay(key));
    if (attack === 'regex') {
      const query = `{gvc="g0"} |~ ${JSON.stringify(HOSTILE_REGEX)}`;
      runs.push(loop(key, `${base}/logs/org/${org}/loki/api/v1/query_range?${new URLSearchParams({ query, limit: '100' })}`));
    }
  }
  if (attack === 'slowbodies') for (let i = 0; i < SLOW_BODIES; i++) slowBody(key, sockets);
}
if (!['queries', 'history', 'replays', 'regex', 'slowbodies'].includes(attack)) throw new Error(`unknown attack '${attack}'`);

process.on('message', async () => {
  stop.abort();
  for (const socket of sockets) socket.destroy();
  await Promise.all(runs);
  process.send!(answers, () => process.exit(0));
});
process.send!('started');
