/** What every pooled connection to PostgreSQL sets for itself (plugins/db.ts). */
import { sql } from 'kysely';
import t from 'tap';
import { backend, emptyDatabase } from '../helper.js';

t.test('queries run without JIT compilation', { skip: backend === 'embedded' && 'PGlite has no JIT' }, async (t) => {
  const db = await emptyDatabase(t);
  t.teardown(() => db.destroy());
  // Two connections at once: the setting belongs to each connection, not to one session.
  const settings = await Promise.all(
    [1, 2].map(() => sql<{ jit: string }>`select current_setting('jit') as jit, pg_sleep(0.05)`.execute(db)),
  );
  t.same(
    settings.map(({ rows }) => rows[0]!.jit),
    ['off', 'off'],
  );
});
