import { isLeapYear } from './filter.js';

/**
 * The upcoming-birthday window as ranges of `birthday_key` (month * 100 + day), so the query is an
 * index range scan on (owner_id, birthday_key). Keys at or after today's key have their next
 * birthday this year; smaller keys next year. A 29 February key falls on 28 February in a year
 * without one.
 */
export interface BirthdayWindow {
  /** Today's key: keys >= it come this year, smaller ones next year. */
  todayKey: number;
  /** null: every key is in the window. Else keys in [todayKey, endKey], or, when `wraps`, >= todayKey or <= endKey. */
  endKey: number | null;
  wraps: boolean;
  /** The day (as a key) a 29 February birthday falls on this year and next year: 229 or 228. */
  leapDayThisYear: number;
  leapDayNextYear: number;
}

const DAY_MS = 86_400_000;

/** Key of a UTC date; 28 February stands for 29 February too in a year without one. */
function keyOf(date: Date, widenFebruary28: boolean): number {
  const key = (date.getUTCMonth() + 1) * 100 + date.getUTCDate();
  return widenFebruary28 && key === 228 && !isLeapYear(date.getUTCFullYear()) ? 229 : key;
}

/** The window from UTC `today` through `today + days` (inclusive), as key ranges. */
export function birthdayWindow(today: Date, days: number): BirthdayWindow {
  const year = today.getUTCFullYear();
  const end = new Date(Date.UTC(year, today.getUTCMonth(), today.getUTCDate()) + days * DAY_MS);
  const todayKey = keyOf(today, false);
  const endKey = keyOf(end, true);
  const endYear = end.getUTCFullYear();
  const leapDay = (y: number) => (isLeapYear(y) ? 229 : 228);
  const base = { todayKey, leapDayThisYear: leapDay(year), leapDayNextYear: leapDay(year + 1) };
  if (endYear === year) return { ...base, endKey, wraps: false };
  if (endYear === year + 1 && endKey < todayKey) return { ...base, endKey, wraps: true };
  return { ...base, endKey: null, wraps: false };
}

/**
 * A run of the window in upcoming order: keys `from`..`to` (inclusive). Usually each key is its own
 * day, so the run is read in (birthday_key, last_name, first_name, id) order, which is the
 * (owner_id, birthday_key, ...) index's order. When `oneDay`, all its keys fall on one day (28 and
 * 29 February in a year without a 29th) and the run is ordered by last_name, first_name, id alone.
 */
export interface BirthdaySegment {
  from: number;
  to: number;
  oneDay: boolean;
}

/** The window as segments in upcoming order: this year's keys, then next year's, 29 February merged into the 28th when it must be. */
export function birthdaySegments({ todayKey, endKey, wraps, leapDayThisYear, leapDayNextYear }: BirthdayWindow): BirthdaySegment[] {
  const years: [from: number, to: number, leapDay: number][] =
    endKey === null
      ? [
          [todayKey, 1231, leapDayThisYear],
          [101, todayKey - 1, leapDayNextYear],
        ]
      : wraps
        ? [
            [todayKey, 1231, leapDayThisYear],
            [101, endKey, leapDayNextYear],
          ]
        : [[todayKey, endKey, leapDayThisYear]];
  const segments: BirthdaySegment[] = [];
  const add = (from: number, to: number, oneDay: boolean) => {
    if (from <= to) segments.push({ from, to, oneDay });
  };
  for (const [from, to, leapDay] of years) {
    if (leapDay === 228 && from <= 228 && to >= 229) {
      add(from, 227, false);
      add(228, 229, true);
      add(230, to, false);
    } else {
      add(from, to, false);
    }
  }
  return segments;
}
