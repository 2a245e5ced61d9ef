/**
 * A database that takes no writes (what a standby answers while a failover promotes another, or a
 * node demoted): writes answer 503 with Retry-After, never 500, and once it takes writes again the
 * very next write succeeds, because the pool left every connection opened while it was read-only.
 * `default_transaction_read_only` stands in for the standby: a session takes it when it starts, so
 * a pooled connection opened before it is lifted stays read-only, as a connection to a standby does.
 */
import { sql } from 'kysely';
import pg from 'pg';
import t from 'tap';
import { backend, POSTGRES_ADMIN_URL } from '../helper.js';
import { as, buildContactsApp, contactBody, createUser } from '../contacts/fixtures.js';

t.test(
  'writes to a read-only server answer 503 with Retry-After; the pool then leaves its connections',
  { skip: backend !== 'postgres' && 'needs real PostgreSQL sessions (the embedded database has one, never read-only)' },
  async (t) => {
    const app = await buildContactsApp(t);
    const user = await createUser(app);
    const call = as(app, user);
    t.equal((await call('POST', '/api/contacts/', contactBody())).statusCode, 201, 'writable at first');

    const { rows } = await sql<{ name: string }>`select current_database() as name`.execute(app.db);
    const database = rows[0]!.name;
    const admin = new pg.Client({ connectionString: POSTGRES_ADMIN_URL });
    await admin.connect();
    t.teardown(() => admin.end());
    await admin.query(`alter database ${database} set default_transaction_read_only = on`);
    // The pool's sessions started writable: end them, as a failover does, so its new ones are read-only.
    await admin.query('select pg_terminate_backend(pid) from pg_stat_activity where datname = $1', [database]);

    const read = await call('GET', '/api/contacts/?limit=5');
    t.equal(read.statusCode, 200, 'reads go on while the server is read-only');
    for (let i = 0; i < 3; i++) {
      const res = await call('POST', '/api/contacts/', contactBody());
      t.equal(res.statusCode, 503, `create ${i + 1} while read-only`);
      t.same(res.json(), { detail: 'Service unavailable: the database is not reachable' });
      t.equal(res.headers['retry-after'], '5', 'Retry-After');
    }

    await admin.query(`alter database ${database} reset default_transaction_read_only`);
    const after = await call('POST', '/api/contacts/', contactBody({ first_name: 'After' }));
    t.equal(after.statusCode, 201, `the first create once writable succeeds: no read-only connection was kept (${after.body})`);
    const stored = await call('GET', '/api/contacts/?limit=100');
    t.equal(stored.json<unknown[]>().length, 2, 'the first contact and the one after; none of the refused ones');
  },
);
