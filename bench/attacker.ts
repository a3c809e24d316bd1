// The adversarial bench's attack, in a process of its own (forked by adversarial.ts): its fetch loops
// must not delay the unrelated GET's client, which would count the attacker's own event loop as
// the server's latency. Arguments: base URL, org, hostile key, querying token, watchers, queriers,
// replay period in ms. Runs until it is sent 'stop', then sends back its counts and exits.
const [base, org, hostileKey, token, watchers, queriers, replayEveryMs] = process.argv.slice(2);

const HEAVY_QUERY = JSON.stringify({
  spec: { match: 'any', terms: Array.from({ length: 10 }, (_, i) => ({ op: '~', property: '*', value: `no-such-text-${i}` })) },
});

const stop = new AbortController();
/** Watch opens by status, and heavy queries answered by status. */
const counts = { replays: {} as Record<string, number>, queries: {} as Record<string, number> };
const tally = (to: Record<string, number>, status: number) => (to[status] = (to[status] ?? 0) + 1);

/** Replays from 0, dropped and opened again every replayEveryMs; reopened at once when refused. */
async function watcher(): Promise<void> {
  while (!stop.signal.aborted) {
    const round = AbortSignal.any([stop.signal, AbortSignal.timeout(Number(replayEveryMs))]);
    try {
      const res = await fetch(`${base}/org/${org}/-watch?since=0`, { headers: { authorization: `Bearer ${hostileKey}` }, signal: round });
      tally(counts.replays, res.status);
      const reader = res.body?.getReader();
      if (reader) for (;;) if ((await reader.read()).done) break;
    } catch {
      // the round's end (or the attack's) aborted it
    }
  }
}

async function querier(): Promise<void> {
  while (!stop.signal.aborted) {
    try {
      const res = await fetch(`${base}/org/${org}/workload/-query`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: HEAVY_QUERY, signal: stop.signal });
      await res.arrayBuffer();
      tally(counts.queries, res.status);
    } catch {
      // aborted at the end
    }
  }
}

const done = Promise.all([...Array.from({ length: Number(watchers) }, watcher), ...Array.from({ length: Number(queriers) }, querier)]);
process.on('message', async () => {
  stop.abort();
  await done;
  process.send!(counts, () => process.exit(0));
});
process.send!('started');
