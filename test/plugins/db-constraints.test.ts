/** Which constraint a database error names (plugins/db.ts), as PostgreSQL and a Citus shard report it. */
import { sql } from 'kysely';
import t from 'tap';
import { referencedUserGone, violatesUnique } from '../../plugins/db.js';
import { emptyDatabase } from '../helper.js';

const db = await emptyDatabase(t);
t.teardown(() => db.destroy());

/** The error `statement` fails with. */
async function failure(statement: ReturnType<typeof sql>): Promise<unknown> {
  try {
    await statement.execute(db);
  } catch (error) {
    return error;
  }
  throw new Error('the statement did not fail');
}

t.test("PostgreSQL's own errors name the constraint", async (t) => {
  await sql`create table owners (id integer primary key)`.execute(db);
  await sql`create table things (owner_id integer references owners (id), name text, constraint things_name_key unique (name))`.execute(db);
  await sql`insert into owners values (1)`.execute(db);
  await sql`insert into things values (1, 'a')`.execute(db);
  const duplicate = await failure(sql`insert into things values (1, 'a')`);
  t.ok(violatesUnique(duplicate, 'things_name_key'));
  t.notOk(violatesUnique(duplicate, 'things_name'), 'the whole name, not a prefix');
  t.notOk(violatesUnique(duplicate, 'other_key'));
  t.notOk(referencedUserGone(duplicate));
  const orphan = await failure(sql`insert into things values (2, 'b')`);
  t.ok(referencedUserGone(orphan), 'things_owner_id_fkey');
  t.notOk(violatesUnique(orphan, 'things_owner_id_fkey'), 'another SQLSTATE');
});

t.test("a Citus shard's errors name the shard's copy, in the message only", async (t) => {
  // As Citus 13.2.2 sends them: no `constraint`, the name with the shard id added.
  const duplicate = { code: '23505', message: 'duplicate key value violates unique constraint "user_names_pkey_102115"' };
  t.ok(violatesUnique(duplicate, 'user_names_pkey'));
  t.notOk(violatesUnique(duplicate, 'user_emails_pkey'));
  t.notOk(
    violatesUnique({ ...duplicate, message: 'duplicate key value violates unique constraint "user_names_pkey_x"' }, 'user_names_pkey'),
  );
  const orphan = {
    code: '23503',
    message: 'insert or update on table "contacts_102040" violates foreign key constraint "contacts_owner_id_fkey_102040"',
  };
  t.ok(referencedUserGone(orphan));
  t.notOk(referencedUserGone({ ...orphan, code: '23505' }));
  t.notOk(referencedUserGone({ code: '23503', message: 'violates foreign key constraint "contacts_book_fkey_102040"' }));
});
