// V8 keeps at most 1536 object shapes that grow from the empty object. Once they are used up, each
// object that gets a first key no shape exists for yet gets a shape of its own, and every property
// access on it falls to V8's slowest lookups. Keel must not use them up itself (ajv's code optimizer
// did, for every generated variable), and the objects each request makes (its headers, its
// response's) must keep their shapes when stored data uses them up. Asked of V8 itself
// (--allow-natives-syntax), in a process of its own.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { test } from 'node:test';
import { promisify } from 'node:util';

const fixture = fileURLToPath(new URL('../fixtures/object-shapes.ts', import.meta.url));

test('Keel leaves room for new shapes, and the request path keeps its shapes when data uses the room up', async () => {
  const { stdout } = await promisify(execFile)(process.execPath, ['--allow-natives-syntax', '--import', 'tsx', fixture], { timeout: 120_000 });
  const result = JSON.parse(stdout.trim().split('\n').at(-1)!) as { statuses: number[]; keel: boolean; afterData: { fresh: boolean; unshared: string[] } };
  assert.deepEqual(result.statuses, [201, 201, 201, 200], 'the writes and the reads were served');
  assert.equal(result.keel, true, 'after compiling every validator and serving requests, a new first key got a shape of its own: something used up the shapes that start empty');
  // The data did use them up (a new first key now gets a shape of its own): what follows is tested under that.
  assert.equal(result.afterData.fresh, false, '2000 distinct first keys left room: this V8 has no such limit, or a larger one');
  assert.deepEqual(result.afterData.unshared, [], 'these first keys of the request path lost their shared shapes');
});
