// Text every backend can store and compare. PostgreSQL refuses NUL in text and JSON and an unpaired
// surrogate (half of a UTF-16 pair) in JSON; SQLite would keep either. So both refuse them, where a
// request's text comes in (its path, query string and body) and wherever text is decoded from what
// a request sent (page tokens and cursors, LogQL strings).

const UNSTORABLE = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

export const UNSTORABLE_TEXT = 'NUL characters or unpaired surrogates';

/** Whether a string holds a NUL or an unpaired surrogate. */
export function unstorable(text: string): boolean {
  return UNSTORABLE.test(text);
}

/** Whether any string or key in a parsed JSON value (or a parsed path or query) is unstorable; iterative, as bodies may nest deeply. */
export function holdsUnstorable(value: unknown): boolean {
  const stack: unknown[] = [value];
  while (stack.length) {
    const v = stack.pop();
    if (typeof v === 'string') {
      if (UNSTORABLE.test(v)) return true;
    } else if (Array.isArray(v)) {
      for (const item of v) stack.push(item);
    } else if (v && typeof v === 'object') {
      for (const key in v) {
        if (UNSTORABLE.test(key)) return true;
        stack.push((v as Record<string, unknown>)[key]);
      }
    }
  }
  return false;
}
