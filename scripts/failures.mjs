// A test reporter that prints, after the run, every failed test with its file and error, so a
// failure in a long run can be found without reading the whole TAP stream above it.
import { inspect } from 'node:util';

export default async function* failures(source) {
  const failed = [];
  for await (const event of source) {
    if (event.type !== 'test:fail') continue;
    const { name, file, line, details } = event.data;
    // A suite fails when a test inside it fails; the test itself is what to look at.
    if (details?.error?.failureType === 'subtestsFailed') continue;
    failed.push({ name, file, line, error: details?.error });
  }
  if (failed.length === 0) return;
  yield `\n# ${failed.length} failed:\n`;
  for (const { name, file, line, error } of failed) {
    yield `# ✖ ${name}\n#   at ${file ?? '?'}:${line ?? '?'}\n`;
    const text = inspect(error?.cause ?? error, { depth: 4 }).split('\n').slice(0, 30);
    yield text.map((row) => `#   ${row}\n`).join('');
  }
}
