// What every error response must look like (DESIGN.md): exactly {status, message, code, details, id}, as JSON.
import assert from 'node:assert/strict';

export const ERROR_KEYS = ['code', 'details', 'id', 'message', 'status'];

export function assertError(res: { status: number; body: any; headers: Record<string, unknown> }, status: number, code: string): void {
  assert.equal(res.status, status, JSON.stringify(res.body));
  assert.deepEqual(Object.keys(res.body).sort(), ERROR_KEYS);
  assert.equal(res.body.status, status);
  assert.equal(res.body.code, code);
  assert.equal(typeof res.body.message, 'string');
  assert.equal(typeof res.body.details, 'object');
  assert.match(res.body.id, /^[0-9a-f-]{36}$/);
  assert.match(String(res.headers['content-type']), /application\/json/);
}
