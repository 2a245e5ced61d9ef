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
