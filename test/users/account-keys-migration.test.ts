/**
 * Migration 034: usernames and e-mail addresses move to keys of their own, filled from the users a
 * database holds; app passwords and avatars are keyed by their user, the avatar foreign-key cycle
 * is gone, and avatars named before keep their names; down restores the keys as they were.
 */
import { type Kysely, sql } from 'kysely';
import t from 'tap';
import { migrateToLatest } from '../../plugins/migrate.js';
import { migrations } from '../../src/db/migrations/index.js';
import { emptyDatabase } from '../helper.js';

const MIGRATION = '034-account-keys';
const before = Object.fromEntries(Object.entries(migrations).filter(([name]) => name < MIGRATION));
const through = Object.fromEntries(Object.entries(migrations).filter(([name]) => name <= MIGRATION));

const db: Kysely<any> = await emptyDatabase(t);
t.teardown(() => db.destroy());

/** The table's constraints and indexes by name, with their definitions. */
async function keys(table: string): Promise<Record<string, string>> {
  const { rows } = await sql<{ name: string; definition: string }>`
    select indexname as name, indexdef as definition from pg_indexes where tablename = ${table}
    union all
    select conname, pg_get_constraintdef(oid) from pg_constraint where conrelid = ${table}::regclass and contype = 'f'
    order by name`.execute(db);
  return Object.fromEntries(rows.map((row) => [row.name, row.definition.replace(/ ON public\./, ' ON ')]));
}

let ann = 0;
let bob = 0;
const LEGACY_NAME = 'AAAAAAAAAAAAAAAAAAAAAA';

t.test('fills the keys from the users a database holds and rekeys app passwords and avatars', async (t) => {
  t.same(await migrateToLatest(db, before), Object.keys(before));
  const { rows } = await sql<{ id: number }>`
    insert into users (username, email, password_hash) values ('Ann.Lee', 'Ann@Example.com', 'x'), ('bob', 'bob@example.com', 'x')
    returning id`.execute(db);
  [ann, bob] = rows.map((row) => row.id) as [number, number];
  await sql`insert into avatars (name, user_id, image) values (${LEGACY_NAME}, ${ann}, '\\x00')`.execute(db);
  await sql`update users set avatar = ${LEGACY_NAME} where id = ${ann}`.execute(db);
  await sql`insert into app_passwords (user_id, name, secret_hash) values (${ann}, 'phone', '\\x01'), (${bob}, 'phone', '\\x02')`.execute(
    db,
  );

  t.same(await migrateToLatest(db, through), [MIGRATION]);
  t.same((await sql`select name, user_id from user_names order by user_id`.execute(db)).rows, [
    { name: 'ann.lee', user_id: ann },
    { name: 'bob', user_id: bob },
  ]);
  t.same((await sql`select email, user_id from user_emails order by user_id`.execute(db)).rows, [
    { email: 'ann@example.com', user_id: ann },
    { email: 'bob@example.com', user_id: bob },
  ]);
  t.same((await sql`select name, user_id from legacy_avatar_names`.execute(db)).rows, [{ name: LEGACY_NAME, user_id: ann }]);
  t.same(await keys('users'), { users_pkey: 'CREATE UNIQUE INDEX users_pkey ON users USING btree (id)' }, 'no index by name or e-mail');
  t.same(await keys('avatars'), {
    avatars_pkey: 'CREATE UNIQUE INDEX avatars_pkey ON avatars USING btree (user_id)',
    avatars_user_id_fkey: 'FOREIGN KEY (user_id) REFERENCES users(id) ON DELETE CASCADE',
  });
  t.same(await keys('app_passwords'), {
    app_passwords_pkey: 'CREATE UNIQUE INDEX app_passwords_pkey ON app_passwords USING btree (user_id, id)',
    app_passwords_user_id_fkey: 'FOREIGN KEY (user_id) REFERENCES users(id) ON DELETE CASCADE',
    app_passwords_user_secret_key: 'CREATE UNIQUE INDEX app_passwords_user_secret_key ON app_passwords USING btree (user_id, secret_hash)',
  });
  const { rows: added } = await sql<{ id: number }>`
    insert into app_passwords (user_id, name, secret_hash) values (${bob}, 'laptop', '\\x01') returning id`.execute(db);
  t.same(added, [{ id: 3 }], 'an integer id drawn by the insert, and the same hash may be another user’s');
});

t.test('a user and an avatar go apart: no cycle', async (t) => {
  await sql`delete from avatars where user_id = ${ann}`.execute(db);
  t.same((await sql`select avatar from users where id = ${ann}`.execute(db)).rows, [{ avatar: LEGACY_NAME }], 'the service clears it');
  await sql`update users set avatar = null where id = ${ann}`.execute(db);
  await sql`delete from legacy_avatar_names`.execute(db);
});

t.test('down restores the keys as they were', async (t) => {
  await sql`delete from app_passwords where id = 3`.execute(db);
  await db.transaction().execute((trx) => migrations[MIGRATION]!.down!(trx));
  const tables = await sql<{ name: string }>`
    select table_name as name from information_schema.tables
    where table_name in ('user_names', 'user_emails', 'legacy_avatar_names')`.execute(db);
  t.same(tables.rows, []);
  t.same(await keys('users'), {
    users_avatar_fkey: 'FOREIGN KEY (avatar) REFERENCES avatars(name) ON DELETE SET NULL',
    users_email_lower_key: 'CREATE UNIQUE INDEX users_email_lower_key ON users USING btree (lower(email))',
    users_pkey: 'CREATE UNIQUE INDEX users_pkey ON users USING btree (id)',
    users_username_lower_key: 'CREATE UNIQUE INDEX users_username_lower_key ON users USING btree (lower(username))',
  });
  t.same(await keys('avatars'), {
    avatars_pkey: 'CREATE UNIQUE INDEX avatars_pkey ON avatars USING btree (name)',
    avatars_user_id_fkey: 'FOREIGN KEY (user_id) REFERENCES users(id) ON DELETE CASCADE',
    avatars_user_id_key: 'CREATE UNIQUE INDEX avatars_user_id_key ON avatars USING btree (user_id)',
  });
  t.same(await keys('app_passwords'), {
    app_passwords_pkey: 'CREATE UNIQUE INDEX app_passwords_pkey ON app_passwords USING btree (id)',
    app_passwords_secret_hash_key: 'CREATE UNIQUE INDEX app_passwords_secret_hash_key ON app_passwords USING btree (secret_hash)',
    app_passwords_user_id_fkey: 'FOREIGN KEY (user_id) REFERENCES users(id) ON DELETE CASCADE',
    app_passwords_user_id_idx: 'CREATE INDEX app_passwords_user_id_idx ON app_passwords USING btree (user_id, id)',
  });
});
