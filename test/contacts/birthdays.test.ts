/** Upcoming birthdays with a pinned clock: year wrap, 29 February in leap and other years, order, pagination. */
import t from 'tap';
import { birthdaySegments, birthdayWindow } from '../../src/contacts/birthdays.js';
import { listUpcomingBirthdays } from '../../src/contacts/contacts.repository.js';
import { as, buildContactsApp, contactBody, createUser } from './fixtures.js';

let clock = new Date('2025-12-30T12:00:00Z');
const app = await buildContactsApp(t, { now: () => clock });
const aliceUser = await createUser(app);
const alice = as(app, aliceUser);
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
  t.same(await upcoming('time_range=364'), [
    'todayA',
    'todayA2',
    'todayB',
    'today',
    'dec31',
    'jan1',
    'jan5',
    'jan6',
    'feb29',
    'feb28',
    'mar1',
    'dec29',
  ]);
  t.same(
    await upcoming('time_range=366'),
    ['todayA', 'todayA2', 'todayB', 'today', 'dec31', 'jan1', 'jan5', 'jan6', 'feb29', 'feb28', 'mar1', 'dec29'],
    'each contact once',
  );
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
  t.same(
    res.json().map((c: { id: number }) => c.id),
    [ids.today, ids.dec31, ids.jan1],
  );
  t.match(res.headers, { 'x-total-count': '8', 'x-per-page': '3', 'x-current-page': '2', 'x-page-count': '3' });
  const base = '/api/contacts/get-upcoming-birthday';
  t.equal(
    res.headers.link,
    `<${base}?skip=0&limit=3>; rel="first", <${base}?skip=0&limit=3>; rel="prev", <${base}?skip=6&limit=3>; rel="next", <${base}?skip=6&limit=3>; rel="last"`,
  );
  const withRange = await alice('GET', `${base}?time_range=1&limit=2`);
  t.equal(
    withRange.headers.link,
    `<${base}?time_range=1&skip=0&limit=2>; rel="first", <${base}?time_range=1&skip=2&limit=2>; rel="next", <${base}?time_range=1&skip=4&limit=2>; rel="last"`,
  );
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

t.test('birthdaySegments: the window in upcoming order, 29 February merged into the 28th in a year without one', async (t) => {
  const at = (iso: string, days: number) => birthdaySegments(birthdayWindow(new Date(`${iso}T00:00:00Z`), days));
  t.same(at('2025-06-01', 7), [{ from: 601, to: 608, oneDay: false }]);
  t.same(at('2025-12-30', 7), [
    { from: 1230, to: 1231, oneDay: false },
    { from: 101, to: 106, oneDay: false },
  ]);
  t.same(at('2025-02-20', 8), [
    { from: 220, to: 227, oneDay: false },
    { from: 228, to: 229, oneDay: true },
  ]);
  t.same(at('2027-02-28', 0), [{ from: 228, to: 229, oneDay: true }], 'today is the 28th, and the 29th with it');
  t.same(at('2028-02-20', 10), [{ from: 220, to: 301, oneDay: false }], 'a leap year keeps the days apart');
  t.same(at('2025-03-01', 365), [
    { from: 301, to: 1231, oneDay: false },
    { from: 101, to: 227, oneDay: false },
    { from: 228, to: 229, oneDay: true },
    { from: 230, to: 300, oneDay: false },
  ]);
  t.same(
    at('2028-02-29', 365),
    [
      { from: 229, to: 1231, oneDay: false },
      { from: 101, to: 228, oneDay: false },
    ],
    'today is the 29th: next year reaches the 28th only',
  );
  t.same(at('2024-01-01', 366), [{ from: 101, to: 1231, oneDay: false }], 'a whole leap year: one segment');
  t.same(at('2025-01-01', 366), [
    { from: 101, to: 227, oneDay: false },
    { from: 228, to: 229, oneDay: true },
    { from: 230, to: 1231, oneDay: false },
  ]);
});

t.test('every page is the matching slice of the whole list, across segments and the merged 28 February', async (t) => {
  // The 28th and 29th of February and the year boundary each split the window into segments.
  const more: [string, string, string][] = [
    ['1990-02-28', 'Leap', 'Abe'],
    ['1988-02-29', 'Abbot', 'Zed'],
    ['1999-02-28', 'Zane', 'Al'],
    ['1985-12-31', 'Brown', 'Al'],
    ['1975-01-01', 'Clark', 'Cy'],
  ];
  for (const [birthday, last_name, first_name] of more)
    await alice('POST', '/api/contacts/', contactBody({ birthday, last_name, first_name }));
  const cases: [string, number][] = [
    ['2025-12-30', 7],
    ['2025-12-30', 70],
    ['2027-02-20', 20],
    ['2027-02-28', 0],
    ['2028-02-20', 20],
    ['2027-03-01', 366],
  ];
  for (const [day, days] of cases) {
    const window = birthdayWindow(new Date(`${day}T09:00:00Z`), days);
    const all = await listUpcomingBirthdays(app.db, aliceUser.id, window, { skip: 0, limit: 1000 });
    const ids = all.rows.map((r) => r.id);
    t.equal(all.total, ids.length, `${day} +${days}: the total counts the list`);
    let pages = 0;
    for (const limit of [1, 2, 3, 5]) {
      for (let skip = 0; skip <= ids.length + 1; skip++) {
        const page = await listUpcomingBirthdays(app.db, aliceUser.id, window, { skip, limit });
        if (page.total !== ids.length || JSON.stringify(page.rows.map((r) => r.id)) !== JSON.stringify(ids.slice(skip, skip + limit))) {
          t.fail(`${day} +${days} skip=${skip} limit=${limit}`);
        }
        pages++;
      }
    }
    t.ok(pages > 0, `${day} +${days}: ${pages} pages of ${ids.length} contacts checked`);
  }
  const leapDay = await listUpcomingBirthdays(app.db, aliceUser.id, birthdayWindow(new Date('2027-02-28T09:00:00Z'), 0), {
    skip: 0,
    limit: 10,
  });
  t.same(
    leapDay.rows.map((r) => `${r.last_name} ${r.first_name}`),
    ['Abbot Zed', 'Leap Abe', 'Leap Lee', 'Moss Max', 'Zane Al'],
    '28 and 29 February interleave by last name, first name in a year without a 29th',
  );
});
