/**
 * The bounded password queue over HTTP: with PASSWORD_QUEUE_LIMIT=1 and bcrypt at cost 12 (about
 * a quarter of a second per hash), a burst of logins or registrations is partly refused with 503
 * and `Retry-After`, never 500, and what is refused changes nothing. Retry-After's value is an
 * estimate that depends on the machine's load; test/plugins/passwords.test.ts checks its formula.
 */
import { availableParallelism } from 'node:os';
import t from 'tap';
import { buildAccountsApp, credentials, login, register, verifiedUser } from './accounts.js';

const BUSY = { detail: 'Too many password checks in progress' };
const SLOW = { BCRYPT_COST: '12', PASSWORD_QUEUE_LIMIT: '1' };
/** More requests than the threads, the threads still starting and the one queue place can take. */
const BURST = availableParallelism() * 2 + 8;

t.test('a burst of logins: some 200, the rest 503 with Retry-After, none anything else', async (t) => {
  const app = await buildAccountsApp(t, { env: SLOW });
  const user = await verifiedUser(app);
  const answers = await Promise.all(Array.from({ length: BURST }, () => login(app, user.username, user.password)));
  const ok = answers.filter((res) => res.statusCode === 200);
  const busy = answers.filter((res) => res.statusCode === 503);
  t.same(
    answers.map((res) => res.statusCode).filter((status) => status !== 200 && status !== 503),
    [],
    'only 200 and 503',
  );
  t.ok(ok.length >= 1, `${ok.length} logged in`);
  t.ok(busy.length >= 8, `${busy.length} of ${BURST} refused`);
  for (const res of busy) {
    t.same(res.json(), BUSY);
    t.match(res.headers['retry-after'], /^[1-9][0-9]*$/);
  }
  for (const res of ok) t.same(Object.keys(res.json()).sort(), ['access_token', 'refresh_token', 'token_type']);
  t.equal((await login(app, user.username, user.password)).statusCode, 200, 'served again once the burst is through');
});

t.test('unknown users meet the same queue: 503 under a burst, as a known user would', async (t) => {
  const app = await buildAccountsApp(t, { env: SLOW });
  const answers = await Promise.all(Array.from({ length: BURST }, () => login(app, 'nobody_here', 'wrong-password')));
  const statuses = answers.map((res) => res.statusCode);
  t.same(
    statuses.filter((status) => status !== 401 && status !== 503),
    [],
    'only 401 and 503',
  );
  t.ok(statuses.filter((status) => status === 503).length >= 8, 'refused like any login');
  t.ok(statuses.includes(401), 'the rest spent their compare');
  for (const res of answers.filter((r) => r.statusCode === 503)) {
    t.same(res.json(), BUSY);
    t.match(res.headers['retry-after'], /^[1-9][0-9]*$/);
  }
});

t.test('a burst of registrations: some 201, the rest 503, and a refused one creates no account', async (t) => {
  const app = await buildAccountsApp(t, { env: SLOW });
  const people = Array.from({ length: BURST }, () => credentials());
  const answers = await Promise.all(people.map((creds) => register(app, creds)));
  t.same(
    answers.map((res) => res.statusCode).filter((status) => status !== 201 && status !== 503),
    [],
    'only 201 and 503',
  );
  t.ok(
    answers.some((res) => res.statusCode === 201),
    'some registered',
  );
  t.ok(answers.filter((res) => res.statusCode === 503).length >= 8, 'the rest refused');
  for (const [i, res] of answers.entries()) {
    const rows = await app.db.selectFrom('users').select('id').where('username', '=', people[i]!.username).execute();
    if (res.statusCode === 503) {
      t.same(res.json(), BUSY);
      t.match(res.headers['retry-after'], /^[1-9][0-9]*$/);
      t.equal(rows.length, 0, `${people[i]!.username} was not created`);
      t.equal((await register(app, people[i]!)).statusCode, 201, 'and can register on retry');
    } else {
      t.equal(rows.length, 1);
    }
  }
});
