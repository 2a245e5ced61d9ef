/**
 * A DAV PUT and a REST PATCH of one contact, both with `If-Match` of the same tag, race: exactly
 * one wins, every time, and the other is 412; what is stored afterwards is the winner's. On
 * PostgreSQL (and Citus) through two instances, with a session of the test holding the contact's row while both
 * requests arrive, so they are provably in flight together; on the embedded database (one session)
 * through one instance, concurrently.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import t, { type Test } from 'tap';
import { loadConfig } from '../../plugins/config.js';
import { buildApp } from '../../src/app.js';
import { buildContactsApp, contactBody } from '../contacts/fixtures.js';
import { backend, LOCK_WAITERS_SQL, testEnv } from '../helper.js';
import { card, davUser, xmlTag } from './dav-client.js';

const ROUNDS = 12;
const env: Record<string, string> = { ...(await testEnv(t)), RATE_LIMIT_ANON_PER_MIN: '100000' };
const first = await buildContactsApp(t, { env });
const second = backend !== 'embedded' ? await buildApp({ config: await loadConfig(env) }) : first;
if (second !== first) t.teardown(() => second.close());
const user = await davUser(first);
const book = `/dav/addressbooks/${user.id}/contacts/`;

async function connect(t: Test): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: env.DATABASE_URL });
  await client.connect();
  t.teardown(() => client.end());
  return client;
}

/** Resolves once `n` sessions of the database wait for a lock. */
async function lockWaiters(monitor: pg.Client, n: number): Promise<void> {
  for (let attempt = 0; attempt < 500; attempt++) {
    const { rows } = await monitor.query<{ n: number }>(LOCK_WAITERS_SQL);
    if (rows[0]!.n >= n) return;
    await sleep(10);
  }
  throw new Error(`${n} sessions never waited for the lock`);
}

function inject(app: FastifyInstance, method: string, url: string, payload: unknown, headers: Record<string, string>) {
  return app.inject({ method: method as 'GET', url, headers, payload: payload as string });
}

t.test('a DAV PUT and a REST PATCH with the same If-Match: exactly one wins, every time', async (t) => {
  const lock = backend !== 'embedded' ? { session: await connect(t), monitor: await connect(t) } : null;
  const tally: Record<string, number> = {};
  for (let round = 0; round < ROUNDS; round++) {
    // Half the contacts are cards a client stored, half were made over REST.
    const viaDav = round % 2 === 0;
    const name = `race-${round}.vcf`;
    let id: number;
    let url: string;
    if (viaDav) {
      await first.inject({
        method: 'PUT',
        url: `${book}${name}`,
        headers: { authorization: user.basic, 'content-type': 'text/vcard' },
        payload: card(`race-${round}`, 'Race Start'),
      });
      const listed = await first.inject({
        method: 'GET',
        url: '/api/contacts/?sort=-id&limit=1',
        headers: { authorization: `Bearer ${user.token}` },
      });
      id = listed.json()[0].id;
      url = `${book}${name}`;
    } else {
      const created = await first.inject({
        method: 'POST',
        url: '/api/contacts/',
        headers: { authorization: `Bearer ${user.token}` },
        payload: contactBody(),
      });
      id = created.json().id;
      const found = await first.inject({ method: 'PROPFIND' as 'GET', url: book, headers: { authorization: user.basic, depth: '1' } });
      url = new RegExp(`<D:href>(${book}[^<]+)</D:href><D:propstat><D:prop><D:getetag>${xmlTag(created.headers.etag)}`).exec(
        found.body,
      )![1]!;
    }
    const tag = (await first.inject({ method: 'GET', url: `/api/contacts/${id}`, headers: { authorization: `Bearer ${user.token}` } }))
      .headers.etag as string;
    const [davApp, restApp] = round % 4 < 2 ? [first, second] : [second, first];
    const davText = card(
      viaDav
        ? `race-${round}`
        : (await first.inject({ method: 'GET', url, headers: { authorization: user.basic } })).body.match(/UID:([^\r\n]+)/)![1]!,
      'Dav Winner',
    );
    if (lock) {
      await lock.session.query('begin');
      await lock.session.query('select id from contacts where owner_id = $1 and id = $2 for update', [user.id, id]);
    }
    const answers = Promise.all([
      inject(davApp, 'PUT', url, davText, { authorization: user.basic, 'content-type': 'text/vcard', 'if-match': tag }),
      inject(
        restApp,
        'PATCH',
        `/api/contacts/${id}`,
        { first_name: 'RestWinner' },
        { authorization: `Bearer ${user.token}`, 'if-match': tag },
      ),
    ]);
    if (lock) {
      await lockWaiters(lock.monitor, 2);
      await lock.session.query('commit');
    }
    const [put, patch] = await answers;
    const label = `round ${round} (${viaDav ? 'a stored card' : 'a REST contact'}${second === first ? '' : ', two instances'})`;
    const winners = [put.statusCode === 204, patch.statusCode === 200].filter(Boolean).length;
    t.equal(winners, 1, `${label}: exactly one wins (PUT ${put.statusCode}, PATCH ${patch.statusCode})`);
    const loser = put.statusCode === 204 ? patch : put;
    t.equal(loser.statusCode, 412, `${label}: the other is 412`);
    const stored = await second.inject({ method: 'GET', url: `/api/contacts/${id}`, headers: { authorization: `Bearer ${user.token}` } });
    const winner = put.statusCode === 204 ? 'DAV' : 'REST';
    t.equal(stored.json().first_name, winner === 'DAV' ? 'Dav' : 'RestWinner', `${label}: the winner's write is stored`);
    t.equal(stored.headers.etag, winner === 'DAV' ? put.headers.etag : patch.headers.etag, `${label}: its tag is current`);
    tally[`${winner} won`] = (tally[`${winner} won`] ?? 0) + 1;
  }
  t.comment(JSON.stringify(tally));
});
