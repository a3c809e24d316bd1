// V8 keeps at most 1536 object shapes that start from the empty object. Code that gives thousands
// of fresh objects distinct first keys (ajv's code optimizer does, for every generated variable)
// uses them up, and from then on each object that gets its first key has a shape of its own: every
// request's headers, every response's, and each property access on the request path falls to V8's
// slowest lookups. Keel, once it has compiled every kind's validator and served requests, must
// leave room. Asked of V8 itself (--allow-natives-syntax), in a process of its own.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { promisify } from 'node:util';

const fixture = fileURLToPath(new URL('../fixtures/object-shapes.ts', import.meta.url));

test('after compiling every validator and serving requests, a new first key still takes a shared shape', async (t) => {
  const { stdout } = await promisify(execFile)(process.execPath, ['--allow-natives-syntax', '--import', 'tsx', fixture], { timeout: 120_000 });
  const result = JSON.parse(stdout.trim().split('\n').at(-1)!) as { statuses: number[]; keel: boolean; optimizedAjv: boolean };
  assert.deepEqual(result.statuses, [201, 201, 201, 200], 'the writes and the read were served');
  assert.equal(result.keel, true, 'a new first key got a shape of its own: something used up the shapes that start empty');
  // The same schemas compiled with ajv's default optimization use them up on this V8; were that to
  // change, the first assertion would no longer tell anything, and this says so.
  if (result.optimizedAjv) t.diagnostic('this V8 has room left even after the optimized compile: the check above no longer guards anything');
});
