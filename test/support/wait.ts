// Waiting on a condition instead of sleeping: polls until it holds, or fails with the last value seen.
import assert from 'node:assert/strict';

export async function waitFor<T>(what: string, read: () => Promise<T>, done: (value: T) => boolean, deadlineMs = 20_000): Promise<T> {
  const until = Date.now() + deadlineMs;
  for (;;) {
    const last = await read();
    if (done(last)) return last;
    if (Date.now() > until) assert.fail(`timed out waiting for ${what}; last: ${JSON.stringify(last).slice(0, 2000)}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}
