import { setTimeout as sleep } from 'node:timers/promises';
import { sql } from 'kysely';
import t from 'tap';
import { card, davAs, davUser } from '../carddav/dav-client.js';
import { backend, LOCK_WAITERS_SQL } from '../helper.js';
import { as, buildContactsApp, contactBody, createUser } from './fixtures.js';

/** The quota is small here (CONTACTS_MAX_PER_USER); one app for the whole file. */
const MAX = 5;

t.test('CONTACTS_MAX_PER_USER on every face that creates', async (t) => {
  const app = await buildContactsApp(t, { env: { CONTACTS_MAX_PER_USER: String(MAX) } });
  const countOf = async (ownerId: number) =>
    Number(
      (
        await app.db
          .selectFrom('contacts')
          .where('owner_id', '=', ownerId)
          .select((eb) => eb.fn.countAll().as('n'))
          .executeTakeFirstOrThrow()
      ).n,
    );
  const full = JSON.stringify({ detail: `Contact limit reached: a user may have at most ${MAX} contacts` });

  await t.test('POST /api/contacts/: 409 at the quota, nothing written; room again after a delete', async (t) => {
    const user = await createUser(app);
    const call = as(app, user);
    const ids: number[] = [];
    for (let i = 0; i < MAX; i++) {
      const res = await call('POST', '/api/contacts/', contactBody());
      t.equal(res.statusCode, 201, `create ${i + 1}`);
      ids.push(res.json<{ id: number }>().id);
    }
    const refused = await call('POST', '/api/contacts/', contactBody());
    t.equal(refused.statusCode, 409);
    t.equal(refused.body, full);
    t.equal(await countOf(user.id), MAX);

    const other = await createUser(app);
    t.equal((await as(app, other)('POST', '/api/contacts/', contactBody())).statusCode, 201, "another user's quota is their own");

    t.equal((await call('DELETE', `/api/contacts/${ids[0]}`)).statusCode, 200);
    t.equal((await call('POST', '/api/contacts/', contactBody())).statusCode, 201, 'a delete makes room');
    t.equal((await call('POST', '/api/contacts/', contactBody())).statusCode, 409);
  });

  await t.test('concurrent creates never overshoot: exactly the quota succeed', async (t) => {
    const user = await createUser(app);
    const call = as(app, user);
    const answers = await Promise.all(Array.from({ length: 20 }, () => call('POST', '/api/contacts/', contactBody())));
    const statuses = answers.map((res) => res.statusCode).sort();
    t.same(statuses, [...Array(MAX).fill(201), ...Array(20 - MAX).fill(409)]);
    for (const res of answers.filter((answer) => answer.statusCode === 409)) t.equal(res.body, full);
    t.equal(await countOf(user.id), MAX);
    const book = await app.db.selectFrom('address_books').select('contacts').where('owner_id', '=', user.id).executeTakeFirstOrThrow();
    t.equal(book.contacts, MAX, "the address book's count agrees");
  });

  await t.test('import: counted whole; one that would pass the quota creates nothing', async (t) => {
    const user = await createUser(app);
    const call = as(app, user);
    const existing = [];
    for (let i = 0; i < 3; i++) existing.push((await call('POST', '/api/contacts/', contactBody())).json<{ email: string }>().email);
    const csv = (emails: string[]) =>
      ['first_name,last_name,email,phone,birthday', ...emails.map((email) => `Ann,Lee,${email},+14155550123,1990-01-02`)].join('\r\n') +
      '\r\n';
    const importing = (emails: string[]) => call('POST', '/api/contacts/import', csv(emails), { 'content-type': 'text/csv' });

    const tooMany = await importing(['a1@example.com', 'a2@example.com', 'a3@example.com']);
    t.equal(tooMany.statusCode, 409);
    t.equal(
      tooMany.body,
      JSON.stringify({
        detail: `The import would take the contacts past the limit of ${MAX} per user (3 now, 3 new in the file); nothing was imported`,
      }),
    );
    t.equal(await countOf(user.id), 3, 'nothing was written');

    // Entries whose e-mail the user already has create nothing, so they do not count.
    const fits = await importing(['a1@example.com', existing[0]!, 'a2@example.com', existing[1]!]);
    t.equal(fits.statusCode, 200);
    t.same(fits.json(), {
      created: 2,
      errors: [
        { entry: 2, detail: 'Contact with this email already exists' },
        { entry: 4, detail: 'Contact with this email already exists' },
      ],
    });
    t.equal(await countOf(user.id), MAX);
    t.equal((await importing(['a9@example.com'])).statusCode, 409, 'one more is over');
  });

  await t.test('CardDAV PUT that creates: 507 with DAV:quota-not-exceeded; replacing a card still works', async (t) => {
    const user = await davUser(app);
    const dav = davAs(app, user);
    const book = `/dav/addressbooks/${user.id}/contacts/`;
    for (let i = 0; i < MAX; i++) {
      const res = await dav('PUT', `${book}c${i}.vcf`, card(`uid-${i}`, `Card ${i}`), {
        'content-type': 'text/vcard',
        'if-none-match': '*',
      });
      t.equal(res.statusCode, 201, `card ${i + 1}`);
    }
    const refused = await dav('PUT', `${book}extra.vcf`, card('uid-extra', 'Extra Card'), {
      'content-type': 'text/vcard',
      'if-none-match': '*',
    });
    t.equal(refused.statusCode, 507);
    t.match(refused.headers['content-type'], /^application\/xml/);
    t.match(
      refused.body,
      /<D:error [^>]*><D:quota-not-exceeded\/><X:detail>Contact limit reached: a user may have at most 5 contacts<\/X:detail><\/D:error>$/,
    );
    t.equal((await dav('GET', `${book}extra.vcf`)).statusCode, 404, 'nothing was stored');
    t.equal(await countOf(user.id), MAX);

    const replaced = await dav('PUT', `${book}c0.vcf`, card('uid-0', 'Card Zero'), { 'content-type': 'text/vcard' });
    t.equal(replaced.statusCode, 204, 'a replace is no create');
  });
});

t.test(
  "a create waits for the owner's address book while another transaction holds it; another owner's does not",
  { skip: backend === 'embedded' && 'PGlite has one connection' },
  async (t) => {
    const app = await buildContactsApp(t, { env: { CONTACTS_MAX_PER_USER: '2' } });
    const user = await createUser(app);
    const other = await createUser(app);
    const call = as(app, user);
    t.equal((await call('POST', '/api/contacts/', contactBody())).statusCode, 201);
    await app.db.connection().execute(async (session) => {
      await sql`begin`.execute(session);
      await sql`select from address_books where owner_id = ${user.id} for update`.execute(session);
      const locked = call('POST', '/api/contacts/', contactBody());
      const blocked = sql<{ n: number }>`${sql.raw(LOCK_WAITERS_SQL)}`;
      while ((await blocked.execute(session)).rows[0]!.n === 0) await sleep(10);
      t.equal((await as(app, other)('POST', '/api/contacts/', contactBody())).statusCode, 201, "another owner's create goes through");
      await sql`insert into contacts (owner_id, first_name, last_name) values (${user.id}, 'Held', 'Lock')`.execute(session);
      await sql`commit`.execute(session);
      t.equal((await locked).statusCode, 409, 'the waiting create then counts the contact committed meanwhile: full');
    });
    const { rows } = await sql<{ n: number }>`select count(*)::int as n from contacts where owner_id = ${user.id}`.execute(app.db);
    t.equal(rows[0]!.n, 2);
  },
);
