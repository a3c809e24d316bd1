// Cron schedules (the five-field form a cron workload's spec.job.schedule takes, in UTC, plus
// the @hourly/@daily/... shorthands): when a schedule fires before or after a given time.
// Pure functions: the workload kind checks schedules with them and the workload reconciler
// starts scheduled runs on the wall clock.

type Field = { min: number; max: number; names?: string[] };
const FIELDS: Field[] = [
  { min: 0, max: 59 },
  { min: 0, max: 23 },
  { min: 1, max: 31 },
  { min: 1, max: 12, names: ['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'] },
  { min: 0, max: 7, names: ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'] },
];
const SHORTHANDS: Record<string, string> = {
  '@yearly': '0 0 1 1 *',
  '@annually': '0 0 1 1 *',
  '@monthly': '0 0 1 * *',
  '@weekly': '0 0 * * 0',
  '@daily': '0 0 * * *',
  '@midnight': '0 0 * * *',
  '@hourly': '0 * * * *',
};
const MINUTE = 60_000;
const DAY = 24 * 60 * MINUTE;
/** How far a search looks (a 29 February schedule fires at least once in eight years). */
const HORIZON_DAYS = 8 * 366;

export interface Schedule {
  minutes: Set<number>;
  hours: Set<number>;
  days: Set<number>;
  months: Set<number>;
  weekdays: Set<number>;
  /** Both day fields restricted: a day matches either (cron's rule). */
  eitherDay: boolean;
}

/** Parses a schedule; throws an Error that names the bad part. */
export function parseSchedule(text: string): Schedule {
  const expanded = SHORTHANDS[text.trim().toLowerCase()] ?? text;
  const parts = expanded.trim().split(/\s+/);
  if (parts.length !== 5) throw new Error(`schedule '${text}' must have five fields (minute hour day-of-month month day-of-week)`);
  const sets = parts.map((part, i) => parseField(part, FIELDS[i]));
  const weekdays = new Set([...sets[4]].map((d) => d % 7));
  return { minutes: sets[0], hours: sets[1], days: sets[2], months: sets[3], weekdays, eitherDay: parts[2] !== '*' && parts[4] !== '*' };
}

function parseField(part: string, field: Field): Set<number> {
  const out = new Set<number>();
  for (const item of part.split(',')) {
    const [range, stepText] = item.split('/');
    const step = stepText === undefined ? 1 : Number(stepText);
    if (!Number.isInteger(step) || step < 1) throw new Error(`bad step in '${item}'`);
    let from: number;
    let to: number;
    if (range === '*') [from, to] = [field.min, field.max];
    else {
      const [a, b] = range.split('-');
      from = value(a, field);
      to = b === undefined ? (stepText === undefined ? from : field.max) : value(b, field);
    }
    if (from > to) throw new Error(`bad range '${range}'`);
    for (let v = from; v <= to; v += step) out.add(v);
  }
  return out;
}

function value(text: string, field: Field): number {
  const named = field.names?.indexOf(text.toLowerCase()) ?? -1;
  const v = named >= 0 ? named + (field.min === 1 ? 1 : 0) : /^\d+$/.test(text) ? Number(text) : NaN;
  if (!(v >= field.min && v <= field.max)) throw new Error(`'${text}' is not in ${field.min}-${field.max}`);
  return v;
}

function dayMatches(s: Schedule, day: Date): boolean {
  if (!s.months.has(day.getUTCMonth() + 1)) return false;
  const dom = s.days.has(day.getUTCDate());
  const dow = s.weekdays.has(day.getUTCDay());
  return s.eitherDay ? dom || dow : dom && dow;
}

/** The first time the schedule fires strictly after `after` (ms), or undefined within the horizon. */
export function nextFire(s: Schedule, after: number): number | undefined {
  const start = Math.floor(after / MINUTE) * MINUTE + MINUTE;
  const firstDay = Math.floor(start / DAY) * DAY;
  for (let d = 0; d < HORIZON_DAYS; d++) {
    const day = firstDay + d * DAY;
    if (!dayMatches(s, new Date(day))) continue;
    for (let h = 0; h < 24; h++) {
      if (!s.hours.has(h)) continue;
      for (let m = 0; m < 60; m++) {
        const at = day + h * 3_600_000 + m * MINUTE;
        if (at >= start && s.minutes.has(m)) return at;
      }
    }
  }
  return undefined;
}

/** The last time the schedule fired at or before `atOrBefore` (ms), or undefined within the horizon. */
export function previousFire(s: Schedule, atOrBefore: number): number | undefined {
  const end = Math.floor(atOrBefore / MINUTE) * MINUTE;
  const lastDay = Math.floor(end / DAY) * DAY;
  for (let d = 0; d < HORIZON_DAYS; d++) {
    const day = lastDay - d * DAY;
    if (!dayMatches(s, new Date(day))) continue;
    for (let h = 23; h >= 0; h--) {
      if (!s.hours.has(h)) continue;
      for (let m = 59; m >= 0; m--) {
        const at = day + h * 3_600_000 + m * MINUTE;
        if (at <= end && s.minutes.has(m)) return at;
      }
    }
  }
  return undefined;
}
