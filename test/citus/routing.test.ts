/**
 * On Citus (docs/performance.md#citus) every table is distributed by its owner column, co-located
 * with `users`, and every statement of a REST or CardDAV session runs on one shard: the database is
 * set to refuse a statement that runs on several (`citus.multi_task_query_log_level = 'error'`), so
 * any such statement would turn an answer into a 500.
 */
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { sql } from 'kysely';
import t, { type Test } from 'tap';
import { loadConfig } from '../../plugins/config.js';
import { buildApp } from '../../src/app.js';
import { bearer, login, register } from '../auth/accounts.js';
import { png } from '../avatars/images.js';
import { basicAuth, card, davAs } from '../carddav/dav-client.js';
import { build, onlyOnCitus, testEnv } from '../helper.js';

/** The distributed tables and their distribution columns; the co-located group is `users`'. */
const COLOCATED_WITH_USERS: Record<string, string> = {
  users: 'id',
  contacts: 'owner_id',
  contact_tombstones: 'owner_id',
  tombstone_horizons: 'owner_id',
  address_books: 'owner_id',
  large_owners: 'owner_id',
  app_passwords: 'user_id',
  avatars: 'user_id',
  idempotency_keys: 'owner_id',
  book_properties: 'owner_id',
};
/** Unique across all users, so distributed by the unique value itself. */
const BY_VALUE: Record<string, string> = { user_names: 'name', user_emails: 'email', legacy_avatar_names: 'name' };
/** The migrations' own bookkeeping, local to the coordinator. */
const LOCAL = ['kysely_migration', 'kysely_migration_lock'];

function expect(t: Test, res: LightMyRequestResponse, status: number, what: string): LightMyRequestResponse {
  t.equal(res.statusCode, status, res.statusCode === status ? what : `${what}: ${res.body.slice(0, 500)}`);
  return res;
}

t.test('every table is distributed by its owner column (or its unique value), co-located with users', { skip: onlyOnCitus }, async (t) => {
  const app = await build(t);
  const { rows } = await sql<{ table: string; column: string; colocation: number }>`
    select table_name::text as table, distribution_column as column, colocation_id as colocation
      from citus_tables where citus_table_type = 'distributed'`.execute(app.db);
  const distributed = Object.fromEntries(rows.map((row) => [row.table, row.column]));
  t.strictSame(distributed, { ...COLOCATED_WITH_USERS, ...BY_VALUE }, 'the distributed tables and their columns');
  const colocation = Object.fromEntries(rows.map((row) => [row.table, row.colocation]));
  for (const table of Object.keys(COLOCATED_WITH_USERS)) t.equal(colocation[table], colocation.users, `${table} is co-located with users`);
  for (const table of Object.keys(BY_VALUE)) t.not(colocation[table], colocation.users, `${table} is not co-located with users`);
  const { rows: reference } = await sql<{ table: string }>`
    select table_name::text as table from citus_tables where citus_table_type <> 'distributed'`.execute(app.db);
  t.strictSame(reference, [], 'no reference or other Citus table');
  const { rows: local } = await sql<{ table: string }>`
    select c.relname as table from pg_class c join pg_namespace n on n.oid = c.relnamespace
     where n.nspname = 'public' and c.relkind in ('r', 'p')
       and not exists (select 1 from pg_dist_partition p where p.logicalrelid = c.oid)
     order by 1`.execute(app.db);
  t.strictSame(
    local.map((row) => row.table),
    LOCAL,
    'no other local table',
  );
});

t.test('a REST and a CardDAV session: every statement runs on one shard', { skip: onlyOnCitus }, async (t) => {
  const env = { ...(await testEnv(t)), RATE_LIMIT_ANON_PER_MIN: '100000' };
  // Migrate first (distributing the tables runs on every shard), then refuse multi-shard statements.
  const migrator = await buildApp({ config: await loadConfig(env) });
  await migrator.ready();
  const database = new URL((env as Record<string, string>).DATABASE_URL!).pathname.slice(1);
  await sql`alter database ${sql.id(database)} set citus.multi_task_query_log_level = 'error'`.execute(migrator.db);
  await migrator.close();
  const app: FastifyInstance = await build(t, { env });
  const { rows } = await sql<{ level: string }>`select current_setting('citus.multi_task_query_log_level') as level`.execute(app.db);
  t.equal(rows[0]!.level, 'error', "the service's sessions refuse multi-shard statements");

  // REST: an account from registration to its archive.
  const creds = {
    username: `router_${Date.now().toString(36)}`,
    email: `router.${Date.now().toString(36)}@example.com`,
    password: 'correct-horse-battery',
  };
  const registered = expect(t, await register(app, creds), 201, 'register');
  const { id } = registered.json<{ id: number }>();
  expect(t, await app.inject({ method: 'GET', url: `/api/auth/verify-email?token=${app.tokens.sign(id, 'verify', 60)}` }), 200, 'verify');
  const signedIn = expect(t, await login(app, creds.username, creds.password), 200, 'login by username');
  expect(t, await login(app, creds.email.toUpperCase(), creds.password), 200, 'login by e-mail');
  const auth = bearer(signedIn.json<{ access_token: string }>().access_token);
  const call = (method: string, url: string, payload?: unknown, headers: Record<string, string> = {}) =>
    app.inject({
      method: method as 'GET',
      url,
      headers: { ...auth, ...headers },
      ...(payload === undefined ? {} : { payload: payload as object }),
    });

  expect(t, await call('GET', '/api/users/me'), 200, 'me');
  const before = expect(t, await call('GET', '/api/contacts/sync'), 200, 'full sync').json<{ next_token: string }>();
  const ids: number[] = [];
  for (const [first, last] of [
    ['Ada', 'Lovelace'],
    ['Alan', 'Turing'],
    ['Grace', 'Hopper'],
  ]) {
    const created = expect(
      t,
      await call('POST', '/api/contacts/', {
        first_name: first,
        last_name: last,
        email: `${first!.toLowerCase()}@example.com`,
        phone: '+14155550123',
        birthday: '1990-12-10',
      }),
      201,
      `create ${first}`,
    );
    ids.push(created.json<{ id: number }>().id);
  }
  expect(
    t,
    await call('POST', '/api/contacts/', {
      first_name: 'Ada',
      last_name: 'Again',
      email: 'ADA@example.com',
      phone: '+14155550123',
      birthday: '1990-01-01',
    }),
    409,
    'a taken e-mail is 409',
  );
  expect(t, await call('GET', `/api/contacts/${ids[0]}`), 200, 'get');
  expect(t, await call('GET', '/api/contacts/?limit=10&sort=-last_name'), 200, 'list');
  expect(t, await call('GET', '/api/contacts/?query=last_name:eq:Turing'), 200, 'filter');
  expect(t, await call('GET', '/api/contacts/?query=first_name:contains:rac'), 200, 'search');
  expect(t, await call('PATCH', `/api/contacts/${ids[1]}`, { phone: '+14155550199' }), 200, 'patch');
  expect(t, await call('DELETE', `/api/contacts/${ids[2]}`), 200, 'delete');
  expect(t, await call('GET', '/api/contacts/get-upcoming-birthday'), 200, 'upcoming birthdays');
  const delta = expect(t, await call('GET', `/api/contacts/sync?token=${encodeURIComponent(before.next_token)}`), 200, 'delta sync');
  t.same(delta.json<{ deleted: number[] }>().deleted, [ids[2]], 'the delta has the delete');
  expect(
    t,
    await call(
      'POST',
      '/api/contacts/import',
      card('imported-1', 'Imported One', ['N:One;Imported;;;', 'EMAIL:imported.one@example.com']),
      { 'content-type': 'text/vcard' },
    ),
    200,
    'import',
  );
  expect(t, await call('GET', '/api/contacts/export'), 200, 'export vCard');
  expect(t, await call('GET', '/api/contacts/export?format=csv'), 200, 'export CSV');
  const avatar = expect(t, await call('PUT', '/api/users/me/avatar', await png(), { 'content-type': 'image/png' }), 200, 'avatar upload');
  expect(
    t,
    await app.inject({ method: 'GET', url: new URL(avatar.json<{ avatar: string }>().avatar).pathname }),
    200,
    'avatar by its name',
  );
  const appPassword = expect(
    t,
    await call('POST', '/api/users/me/app-passwords', { name: 'phone', password: creds.password }),
    201,
    'app password',
  );
  expect(t, await call('GET', '/api/users/me/app-passwords'), 200, 'app passwords listed');
  expect(t, await call('GET', '/api/users/me/export'), 200, 'account archive');

  // CardDAV with the app password, signed in by name.
  const dav = davAs(app, { basic: basicAuth(creds.username, appPassword.json<{ password: string }>().password) });
  const book = `/dav/addressbooks/${id}/contacts/`;
  const VCARD = { 'content-type': 'text/vcard; charset=utf-8' };
  const props = expect(
    t,
    await dav(
      'PROPFIND',
      book,
      '<D:propfind xmlns:D="DAV:"><D:prop><D:sync-token/><D:getctag xmlns:D="http://calendarserver.org/ns/"/></D:prop></D:propfind>',
      { depth: '0' },
    ),
    207,
    'PROPFIND the book',
  );
  const token = /<D:sync-token>([^<]+)<\/D:sync-token>/.exec(props.body)?.[1];
  t.ok(token, 'the book has a sync token');
  expect(
    t,
    await dav('PROPFIND', book, '<D:propfind xmlns:D="DAV:"><D:prop><D:getetag/></D:prop></D:propfind>', { depth: '1' }),
    207,
    'PROPFIND its cards',
  );
  expect(
    t,
    await dav('PUT', `${book}dav-1.vcf`, card('dav-1', 'Dav One', ['EMAIL:dav.one@example.com']), { ...VCARD, 'if-none-match': '*' }),
    201,
    'PUT a new card',
  );
  expect(t, await dav('PUT', `${book}dav-2.vcf`, card('dav-2', 'Dav Two'), VCARD), 201, 'PUT another');
  expect(t, await dav('GET', `${book}dav-1.vcf`), 200, 'GET the card');
  expect(
    t,
    await dav(
      'REPORT',
      book,
      `<C:addressbook-multiget xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:carddav"><D:prop><D:getetag/><C:address-data/></D:prop><D:href>${book}dav-1.vcf</D:href><D:href>${book}dav-2.vcf</D:href></C:addressbook-multiget>`,
      { depth: '1' },
    ),
    207,
    'REPORT addressbook-multiget',
  );
  expect(
    t,
    await dav('MOVE', `${book}dav-2.vcf`, undefined, { destination: `http://localhost:80${book}dav-2-moved.vcf` }),
    201,
    'MOVE renames the card',
  );
  expect(t, await dav('DELETE', `${book}dav-1.vcf`), 204, 'DELETE the card');
  const synced = expect(
    t,
    await dav(
      'REPORT',
      book,
      `<D:sync-collection xmlns:D="DAV:"><D:sync-token>${token}</D:sync-token><D:sync-level>1</D:sync-level><D:prop><D:getetag/></D:prop></D:sync-collection>`,
    ),
    207,
    'REPORT sync-collection from the earlier token',
  );
  t.match(synced.body, `${book}dav-2-moved.vcf`, 'the sync has the moved card');
  t.match(synced.body, `${book}dav-1.vcf`, 'and the deleted one');
  expect(t, await call('DELETE', '/api/users/me', { password: creds.password }), 204, 'account deleted');
});
