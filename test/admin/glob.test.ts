// Fault-rule globs: the same answers as the anchored regular expression a glob reads as, without
// its backtracking.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { glob } from '../../src/admin/glob.js';

const asRegex = (pattern: string) => new RegExp(`^${pattern.split('*').map((part) => part.replace(/[.+?^${}()|[\]\\]/g, '\\$&')).join('.*')}$`);

test('a glob matches exactly what `*` as "any characters" matches', () => {
  const text = fc.array(fc.constantFrom('a', 'b', '/', '.'), { maxLength: 12 }).map((cs) => cs.join(''));
  const pattern = fc.array(fc.constantFrom('a', 'b', '/', '.', '*'), { maxLength: 8 }).map((cs) => cs.join(''));
  fc.assert(fc.property(pattern, text, (p, t) => glob(p)(t) === asRegex(p).test(t)), { numRuns: 20_000 });
  for (const [p, t, want] of [['/org/*/gvc/*', '/org/a/gvc/b', true], ['*', '', true], ['a*a', 'a', false], ['*ab*ab*', 'abab', true], ['*ab*ab*', 'aba', false], ['x', 'x', true]] as const) {
    assert.equal(glob(p)(t), want, `${p} on ${t}`);
  }
});

test('ten stars against a 100,000-character path answer (a backtracking match would take years)', () => {
  const path = `/console/${'a'.repeat(100_000)}`;
  assert.equal(glob('/*a*a*a*a*a*a*a*a*a*b')(path), false);
  assert.equal(glob('/*c*o*n*s*o*l*e*/*a*a')(path), true);
});
