import { type Kysely, sql } from 'kysely';

// Frozen: migrations take Kysely<any>, never the app's Database type.

/**
 * Keys that hold when every table is distributed by its owner (`users` by id, docs/accounts.md):
 *
 * - Usernames and e-mail addresses, lower-cased as the unique indexes on `users` had them, move to
 *   `user_names` and `user_emails`, keyed by the value itself, so each stays unique among all users
 *   and a sign-in finds the user by one key. No foreign key to `users`: the service writes them in
 *   the transaction of every write of `users.username` or `users.email`.
 * - App passwords are keyed by their user: a sign-in resolves the user by name first.
 * - Avatars are keyed by their user (one each), and `users.avatar` no longer references them (a
 *   foreign-key cycle). New names start with the owner's id; the names issued before keep their
 *   URLs through `legacy_avatar_names`, which says whose each one is.
 */
export async function up(db: Kysely<any>): Promise<void> {
  await sql`create table user_names (name text not null, user_id integer not null, constraint user_names_pkey primary key (name))`.execute(
    db,
  );
  await sql`create table user_emails (email text not null, user_id integer not null, constraint user_emails_pkey primary key (email))`.execute(
    db,
  );
  await sql`insert into user_names (name, user_id) select lower(username), id from users`.execute(db);
  await sql`insert into user_emails (email, user_id) select lower(email), id from users`.execute(db);
  await sql`drop index users_username_lower_key`.execute(db);
  await sql`drop index users_email_lower_key`.execute(db);

  await sql`alter table app_passwords drop constraint app_passwords_secret_hash_key`.execute(db);
  await sql`alter table app_passwords drop constraint app_passwords_pkey`.execute(db);
  await sql`alter table app_passwords add constraint app_passwords_pkey primary key (user_id, id)`.execute(db);
  await sql`alter table app_passwords add constraint app_passwords_user_secret_key unique (user_id, secret_hash)`.execute(db);
  // The new primary key is this index.
  await sql`drop index app_passwords_user_id_idx`.execute(db);

  await sql`alter table users drop constraint users_avatar_fkey`.execute(db);
  await sql`alter table avatars drop constraint avatars_pkey`.execute(db);
  await sql`alter table avatars drop constraint avatars_user_id_key`.execute(db);
  await sql`alter table avatars add constraint avatars_pkey primary key (user_id)`.execute(db);
  await sql`create table legacy_avatar_names (name text not null, user_id integer not null, constraint legacy_avatar_names_pkey primary key (name))`.execute(
    db,
  );
  await sql`insert into legacy_avatar_names (name, user_id) select name, user_id from avatars`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('legacy_avatar_names').execute();
  await sql`alter table avatars drop constraint avatars_pkey`.execute(db);
  await sql`alter table avatars add constraint avatars_pkey primary key (name)`.execute(db);
  await sql`alter table avatars add constraint avatars_user_id_key unique (user_id)`.execute(db);
  await sql`alter table users add constraint users_avatar_fkey foreign key (avatar) references avatars (name) on delete set null`.execute(
    db,
  );

  await sql`create index app_passwords_user_id_idx on app_passwords (user_id, id)`.execute(db);
  await sql`alter table app_passwords drop constraint app_passwords_user_secret_key`.execute(db);
  await sql`alter table app_passwords drop constraint app_passwords_pkey`.execute(db);
  await sql`alter table app_passwords add constraint app_passwords_pkey primary key (id)`.execute(db);
  await sql`alter table app_passwords add constraint app_passwords_secret_hash_key unique (secret_hash)`.execute(db);

  await sql`create unique index users_username_lower_key on users (lower(username))`.execute(db);
  await sql`create unique index users_email_lower_key on users (lower(email))`.execute(db);
  await db.schema.dropTable('user_emails').execute();
  await db.schema.dropTable('user_names').execute();
}
