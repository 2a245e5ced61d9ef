/** Upcoming birthdays with a pinned clock: year wrap, 29 February in leap and other years, order, pagination. */
import t from 'tap';
import { birthdayWindow } from '../../src/contacts/birthdays.js';
import { as, buildContactsApp, contactBody, createUser } from './fixtures.js';

let clock = new Date('2025-12-30T12:00:00Z');
const app = await buildContactsApp(t, { now: () => clock });
const alice = as(app, await createUser(app));
const bob = as(app, await createUser(app));

const people: Record<string, [birthday: string, last: string, first: string]> = {
  today: ['1990-12-30', 'Young', 'Yara'],
  todayB: ['2001-12-30', 'Adams', 'Zoe'],
  todayA: ['1995-12-30', 'Adams', 'Amy'],
  todayA2: ['1996-12-30', 'Adams', 'Amy'],
  dec31: ['1985-12-31', 'Brown', 'Bo'],
  jan1: ['1970-01-01', 'Clark', 'Cy'],
  jan5: ['2000-01-05', 'Diaz', 'Di'],
  jan6: ['2000-01-06', 'Evans', 'Ed'],
  feb29: ['1992-02-29', 'Leap', 'Lee'],
  feb28: ['1980-02-28', 'Moss', 'Max'],
  mar1: ['1995-03-01', 'Nash', 'Ned'],
  dec29: ['1990-12-29', 'Owen', 'Oz'],
};
const ids: Record<string, number> = {};
for (const [label, [birthday, last_name, first_name]] of Object.entries(people)) {
  const res = await alice('POST', '/api/contacts/', contactBody({ birthday, last_name, first_name }));
  ids[label] = res.json().id;
}
await bob('POST', '/api/contacts/', contactBody({ birthday: '1990-12-30' }));

async function upcoming(qs: string): Promise<string[]> {
  const res = await alice('GET', `/api/contacts/get-upcoming-birthday?${qs}`);
  if (res.statusCode !== 200) throw new Error(`${qs}: ${res.statusCode} ${res.body}`);
  const labels = Object.fromEntries(Object.entries(ids).map(([label, id]) => [id, label]));
  return res.json().map((c: { id: number }) => labels[c.id] ?? `foreign ${c.id}`);
}

t.test('today 2025-12-30: the window wraps into 2026, ordered by day then last name, first name, id', async (t) => {
  clock = new Date('2025-12-30T12:00:00Z');
  t.same(await upcoming(''), ['todayA', 'todayA2', 'todayB', 'today', 'dec31', 'jan1', 'jan5', 'jan6'], 'default 7 days, inclusive');
  t.same(await upcoming('time_range=0'), ['todayA', 'todayA2', 'todayB', 'today'], 'today only');
  t.same(await upcoming('time_range=1'), ['todayA', 'todayA2', 'todayB', 'today', 'dec31']);
  t.same(await upcoming('time_range=2'), ['todayA', 'todayA2', 'todayB', 'today', 'dec31', 'jan1']);
  t.same(await upcoming('time_range=6'), ['todayA', 'todayA2', 'todayB', 'today', 'dec31', 'jan1', 'jan5']);
  // 2026 has no 29 February: it falls on the 28th, ordered with that day's birthdays by name.
  t.same(await upcoming('time_range=60'), ['todayA', 'todayA2', 'todayB', 'today', 'dec31', 'jan1', 'jan5', 'jan6', 'feb29', 'feb28']);
  t.same(await upcoming('time_range=61').then((l) => l.slice(-3)), ['feb29', 'feb28', 'mar1']);
  t.same(await upcoming('time_range=363').then((l) => l.includes('dec29')), false, 'yesterday is 364 days away');
  t.same(await upcoming('time_range=364'), ['todayA', 'todayA2', 'todayB', 'today', 'dec31', 'jan1', 'jan5', 'jan6', 'feb29', 'feb28', 'mar1', 'dec29']);
  t.same(await upcoming('time_range=366'), ['todayA', 'todayA2', 'todayB', 'today', 'dec31', 'jan1', 'jan5', 'jan6', 'feb29', 'feb28', 'mar1', 'dec29'], 'each contact once');
});

t.test('a late-UTC clock still means that UTC day', async (t) => {
  clock = new Date('2025-12-30T23:59:59.999Z');
  t.same(await upcoming('time_range=0'), ['todayA', 'todayA2', 'todayB', 'today']);
  clock = new Date('2025-12-31T00:00:00.000Z');
  t.same(await upcoming('time_range=0'), ['dec31']);
});

t.test('29 February in and around leap years', async (t) => {
  clock = new Date('2028-02-27T08:00:00Z'); // 2028 is a leap year
  t.same(await upcoming('time_range=1'), ['feb28']);
  t.same(await upcoming('time_range=2'), ['feb28', 'feb29'], 'on the 29th in a leap year');
  t.same(await upcoming('time_range=3'), ['feb28', 'feb29', 'mar1']);

  clock = new Date('2027-02-28T08:00:00Z');
  t.same(await upcoming('time_range=0'), ['feb29', 'feb28'], 'on the 28th otherwise, same day so by last name');

  clock = new Date('2028-02-29T08:00:00Z');
  t.same(await upcoming('time_range=0'), ['feb29']);
  const year = await upcoming('time_range=365');
  t.equal(year.length, 12);
  t.same([year[0], year.at(-1)], ['feb29', 'feb28'], '2029-02-28 is 365 days away');

  clock = new Date('2027-03-01T08:00:00Z'); // next February is 2028's, with a 29th
  t.same(await upcoming('time_range=364').then((l) => [l.at(-1), l.includes('feb29')]), ['feb28', false]);
  t.same(await upcoming('time_range=365').then((l) => l.slice(-2)), ['feb28', 'feb29']);

  clock = new Date('2025-03-01T00:00:00Z');
  t.same(await upcoming('time_range=0'), ['mar1'], 'a 29 February birthday is not moved to 1 March');
});

t.test('pagination headers and links; other users are never included', async (t) => {
  clock = new Date('2025-12-30T12:00:00Z');
  const res = await alice('GET', '/api/contacts/get-upcoming-birthday?limit=3&skip=3');
  t.equal(res.statusCode, 200);
  t.ok(['HIT', 'MISS'].includes(res.headers['x-cache'] as string));
  t.same(res.json().map((c: { id: number }) => c.id), [ids.today, ids.dec31, ids.jan1]);
  t.match(res.headers, { 'x-total-count': '8', 'x-per-page': '3', 'x-current-page': '2', 'x-page-count': '3' });
  const base = '/api/contacts/get-upcoming-birthday';
  t.equal(
    res.headers.link,
    `<${base}?skip=0&limit=3>; rel="first", <${base}?skip=0&limit=3>; rel="prev", <${base}?skip=6&limit=3>; rel="next", <${base}?skip=6&limit=3>; rel="last"`,
  );
  const withRange = await alice('GET', `${base}?time_range=1&limit=2`);
  t.equal(withRange.headers.link, `<${base}?time_range=1&skip=0&limit=2>; rel="first", <${base}?time_range=1&skip=2&limit=2>; rel="next", <${base}?time_range=1&skip=4&limit=2>; rel="last"`);
  const past = await alice('GET', `${base}?skip=50`);
  t.same(past.json(), []);
  t.equal(past.headers['x-total-count'], '8', 'the total survives a page past the end');

  clock = new Date('2025-06-01T00:00:00Z');
  const none = await alice('GET', `${base}?time_range=0`);
  t.same(none.json(), []);
  t.match(none.headers, { 'x-total-count': '0', 'x-page-count': '0', 'x-current-page': '1' });
  t.notOk('link' in none.headers);

  clock = new Date('2025-12-30T12:00:00Z');
  const bobs = await bob('GET', `${base}?time_range=0`);
  t.equal(bobs.json().length, 1);
  t.notOk(Object.values(ids).includes(bobs.json()[0].id));
});

t.test('time_range bounds are 422', async (t) => {
  const cases: [string, string][] = [
    ['time_range=-1', 'querystring/time_range must be >= 0'],
    ['time_range=367', 'querystring/time_range must be <= 366'],
    ['time_range=x', 'querystring/time_range must be integer'],
    ['limit=1001', 'querystring/limit must be <= 1000'],
  ];
  for (const [qs, detail] of cases) {
    const res = await alice('GET', `/api/contacts/get-upcoming-birthday?${qs}`);
    t.equal(res.statusCode, 422, qs);
    t.same(res.json(), { detail }, qs);
  }
});

t.test('birthdayWindow: key ranges', async (t) => {
  const at = (iso: string, days: number) => birthdayWindow(new Date(`${iso}T00:00:00Z`), days);
  t.match(at('2025-06-01', 7), { todayKey: 601, endKey: 608, wraps: false });
  t.match(at('2025-12-30', 7), { todayKey: 1230, endKey: 106, wraps: true });
  t.match(at('2025-02-20', 8), { todayKey: 220, endKey: 229, wraps: false }, '28 February stands for the 29th in 2025');
  t.match(at('2028-02-20', 8), { endKey: 228 });
  t.match(at('2025-03-01', 365), { endKey: null }, 'a whole year: every key');
  t.match(at('2024-12-31', 366), { endKey: null });
  t.match(at('2025-01-01', 0), { todayKey: 101, endKey: 101 });
  t.match(at('2027-06-01', 0), { leapDayThisYear: 228, leapDayNextYear: 229 });
  t.match(at('2028-06-01', 0), { leapDayThisYear: 229, leapDayNextYear: 228 });
});
