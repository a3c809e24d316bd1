// Regular expressions that tenants write (a workload's header filters) run on V8's linear-time
// engine: matching costs time in proportion to the input, whatever the pattern, so no pattern can
// stall the event loop. That engine has no backreferences or lookaround; a pattern that needs them
// is refused when it is written.
import { setFlagsFromString } from 'node:v8';

setFlagsFromString('--enable-experimental-regexp-engine');

/** `pattern` as a match of a whole value, on the linear-time engine; throws a SyntaxError for a pattern it cannot run. */
export function wholeValueMatch(pattern: string): RegExp {
  return new RegExp(`^(?:${pattern})$`, 'l');
}
