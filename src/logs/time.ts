// Log times: nanoseconds since the epoch, kept as 19-digit strings (text order is time order, and
// no value goes through a JavaScript number, which would round them).

const DIGITS = 19;
const MAX = 10n ** BigInt(DIGITS) - 1n;
export const NS_PER_MS = 1_000_000n;

/** A time in ns as a log time: clamped to what 19 digits hold. */
export function tsOf(ns: bigint): string {
  const clamped = ns < 0n ? 0n : ns > MAX ? MAX : ns;
  return clamped.toString().padStart(DIGITS, '0');
}

export const tsOfMs = (ms: number): string => tsOf(BigInt(Math.trunc(ms)) * NS_PER_MS);
export const msOfTs = (ts: string): number => Number(BigInt(ts) / NS_PER_MS);
/** The time as Loki answers it: ns without leading zeros. */
export const nsText = (ts: string): string => BigInt(ts).toString();

let last = 0n;

/**
 * The time of a line written at `ms`, strictly after every line this process stamped before: lines
 * written in one pass keep their order, and a client that resumes after a line's time (as `cpln
 * logs` does) misses none of this process's lines.
 */
export function stamp(ms: number): string {
  let ns = BigInt(Math.trunc(ms)) * NS_PER_MS;
  if (ns <= last) ns = last + 1n;
  last = ns;
  return tsOf(ns);
}

/**
 * A time parameter as Loki takes it: ns (or s, with a fraction) since the epoch, or RFC 3339.
 * Returns undefined when it is neither.
 */
export function parseTime(text: string): string | undefined {
  const value = text.trim();
  if (/^\d+$/.test(value)) {
    // Loki reads 10 digits or fewer as seconds.
    const n = BigInt(value);
    return tsOf(value.length <= 10 ? n * 1_000_000_000n : n);
  }
  if (/^\d+\.\d+$/.test(value)) {
    const [s, frac] = value.split('.');
    return tsOf(BigInt(s) * 1_000_000_000n + BigInt(frac.slice(0, 9).padEnd(9, '0')));
  }
  if (!/^\d{4}-\d{2}-\d{2}T/.test(value)) return undefined;
  const ms = Date.parse(value);
  if (Number.isNaN(ms)) return undefined;
  const fraction = /\.(\d+)/.exec(value)?.[1] ?? '';
  // Date.parse keeps ms: the digits after them come from the text.
  return tsOf(BigInt(ms) * NS_PER_MS + BigInt(fraction.slice(3, 9).padEnd(6, '0')));
}

/**
 * A duration as Loki takes it (`1h`, `30m`, `1h30m`, `500ms`, or plain seconds) in ms, or undefined.
 */
export function parseDuration(text: string): number | undefined {
  const value = text.trim();
  if (/^\d+(\.\d+)?$/.test(value)) return Number(value) * 1000;
  const units: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };
  let total = 0;
  let rest = value;
  while (rest) {
    const m = /^(\d+(?:\.\d+)?)(ms|s|m|h|d|w)/.exec(rest);
    if (!m) return undefined;
    total += Number(m[1]) * units[m[2]];
    rest = rest.slice(m[0].length);
  }
  return value ? total : undefined;
}
