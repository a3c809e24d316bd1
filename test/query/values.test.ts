import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { compareStrings, isNumericString, lowerAscii, normalizeDateTime } from '../../src/query/values.js';

test('full ISO-8601 date-times normalize to toISOString form; anything else stays as is', () => {
  const cases: Array<[string, string | undefined]> = [
    ['2025-01-01T00:00:00Z', '2025-01-01T00:00:00.000Z'],
    ['2025-01-01T00:00:00.5Z', '2025-01-01T00:00:00.500Z'],
    ['2025-01-01T00:00:00.123456Z', '2025-01-01T00:00:00.123Z'],
    ['2025-01-01T01:30:00+01:30', '2025-01-01T00:00:00.000Z'],
    ['2025-01-01T00:00:00-0200', '2025-01-01T02:00:00.000Z'],
    ['2025-01-01t00:00z', '2025-01-01T00:00:00.000Z'],
    ['2025-01-01 10:00:00', '2025-01-01T10:00:00.000Z'],
    ['0099-03-01T00:00:00Z', '0099-03-01T00:00:00.000Z'],
    ['2024-02-29T00:00:00Z', '2024-02-29T00:00:00.000Z'],
    ['2025-02-29T00:00:00Z', undefined],
    ['2025-13-01T00:00:00Z', undefined],
    ['2025-01-01T24:00:00Z', undefined],
    ['2025-01-01', undefined],
    ['2025-01-01T00:00:00+25:00', undefined],
    ['yesterday', undefined],
  ];
  for (const [input, expected] of cases) assert.equal(normalizeDateTime(input), expected, input);
});

test('numeric strings: JSON numbers without exponent, at most 15 characters', () => {
  for (const s of ['0', '-0', '12', '-1.5', '0.25', '123456789012345']) assert.ok(isNumericString(s), s);
  for (const s of ['', '-', '01', '1.', '.5', '+1', '1e5', ' 1', '1,5', '1234567890123456', 'NaN']) assert.ok(!isNumericString(s), s);
});

test('compareStrings orders by code point (UTF-8 bytes), like SQLite BINARY and COLLATE "C"', () => {
  assert.ok(compareStrings('B', 'a') < 0);
  assert.ok(compareStrings('a', 'ab') < 0);
  assert.ok(compareStrings('\uffff', '😀') < 0); // U+FFFF < U+1F600, though UTF-16 units say otherwise
  fc.assert(
    fc.property(fc.string({ unit: 'binary' }), fc.string({ unit: 'binary' }), (a, b) => {
      const bytes = Math.sign(Buffer.compare(Buffer.from(a), Buffer.from(b)));
      assert.equal(Math.sign(compareStrings(a, b)), bytes);
    }),
  );
});

test('lowerAscii folds A-Z only', () => {
  assert.equal(lowerAscii('ÄBC-Xyz'), 'Äbc-xyz');
});
