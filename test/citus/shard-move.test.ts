/**
 * A shard group moved to another worker under a write load (docs/performance.md#citus): one user's
 * REST creates, patches and deletes and CardDAV PUTs run while `citus_move_shard_placement` moves
 * that user's shards with logical replication. Every acknowledged write is there exactly once
 * afterwards, a REST delta sync and a CardDAV sync-collection from tokens taken before the move
 * report every change made after them, and no answer is a 500.
 */
import type { LightMyRequestResponse } from 'fastify';
import pg from 'pg';
import t from 'tap';
import { bearer, loggedInUser } from '../auth/accounts.js';
import { basicAuth, card, davAs } from '../carddav/dav-client.js';
import { as, buildContactsApp, contactBody, createContacts } from '../contacts/fixtures.js';
import { onlyOnCitus } from '../helper.js';

interface SyncPage {
  contacts: { id: number; phone: string | null }[];
  deleted: number[];
  next_token: string;
  has_more: boolean;
}

t.test('a shard group moved under writes loses nothing and breaks no sync', { skip: onlyOnCitus }, async (t) => {
  const app = await buildContactsApp(t);
  // Registered through the API, so every table an account has (its name and e-mail keys too) holds its rows.
  const session = await loggedInUser(app);
  const alice = { id: session.id, token: session.accessToken };
  const made = await app.inject({
    method: 'POST',
    url: '/api/users/me/app-passwords',
    headers: bearer(session.accessToken),
    payload: { name: 'phone', password: session.password },
  });
  t.equal(made.statusCode, 201, 'an app password for CardDAV');
  const bobSession = await loggedInUser(app);
  const bob = { id: bobSession.id, token: bobSession.accessToken };
  const rest = as(app, alice);
  const dav = davAs(app, { basic: basicAuth(session.username, made.json<{ password: string }>().password) });
  const book = `/dav/addressbooks/${alice.id}/contacts/`;
  const VCARD = { 'content-type': 'text/vcard; charset=utf-8' };
  const earlier = await createContacts(
    rest,
    Array.from({ length: 30 }, () => contactBody()),
  );
  const bobs = await createContacts(
    as(app, bob),
    Array.from({ length: 10 }, () => contactBody()),
  );

  // Tokens from before the move: a REST sync read to its end, and the book's sync token.
  let restToken: string | undefined;
  for (let more = true; more;) {
    const res = await rest('GET', `/api/contacts/sync${restToken ? `?token=${encodeURIComponent(restToken)}` : ''}`);
    const page = res.json<SyncPage>();
    restToken = page.next_token;
    more = page.has_more;
  }
  const props = await dav('PROPFIND', book, '<D:propfind xmlns:D="DAV:"><D:prop><D:sync-token/></D:prop></D:propfind>', { depth: '0' });
  const davToken = /<D:sync-token>([^<]+)<\/D:sync-token>/.exec(props.body)?.[1];
  t.ok(davToken, 'the book has a sync token');

  const admin = new pg.Client({ connectionString: app.config.databaseUrl! });
  await admin.connect();
  t.teardown(() => admin.end());
  const { rows: shards } = await admin.query<{ shardid: string }>(
    "select get_shard_id_for_distribution_column('users', $1::bigint)::text as shardid",
    [alice.id],
  );
  const shard = shards[0]!.shardid;
  const placement = async () =>
    (await admin.query<{ port: number }>('select nodeport as port from pg_dist_shard_placement where shardid = $1', [shard])).rows.map(
      (r) => r.port,
    );
  const [from] = await placement();
  const { rows: workers } = await admin.query<{ host: string; port: number }>(
    'select nodename as host, nodeport as port from pg_dist_node where groupid <> 0 and noderole = $1 order by nodeport',
    ['primary'],
  );
  const target = workers.find((w) => w.port !== from)!;
  t.ok(from !== undefined && target, `alice's shard ${shard} is on ${from}; it moves to ${target.port}`);

  // The load: what was acknowledged, and every answer's status.
  const created = new Map<number, string>();
  const phones = new Map<number, string>();
  const deleted = new Set<number>();
  const cards: string[] = [];
  const statuses = new Map<string, number>();
  const tally = (what: string, res: LightMyRequestResponse, ok: number): boolean => {
    const key = `${what} ${res.statusCode}`;
    statuses.set(key, (statuses.get(key) ?? 0) + 1);
    return res.statusCode === ok;
  };
  const deletable = earlier.slice(0, 15).map((c) => c.id as number);
  const patchable = earlier.slice(15).map((c) => c.id as number);
  let moving: 'before' | 'during' | 'after' = 'before';
  let afterOps = 0;
  let n = 0;
  const step = async (): Promise<void> => {
    const i = n++;
    switch (i % 4) {
      case 0: {
        const body = contactBody();
        const res = await rest('POST', '/api/contacts/', body);
        if (tally('REST create', res, 201)) created.set(res.json<{ id: number }>().id, body.email as string);
        break;
      }
      case 1: {
        const id = patchable[i % patchable.length]!;
        const phone = `+1415555${String(1000 + (i % 9000)).padStart(4, '0')}`;
        const res = await rest('PATCH', `/api/contacts/${id}`, { phone });
        if (tally('REST patch', res, 200)) phones.set(id, phone);
        break;
      }
      case 2: {
        const id = deletable.shift();
        if (id === undefined) break;
        const res = await rest('DELETE', `/api/contacts/${id}`);
        if (tally('REST delete', res, 200)) deleted.add(id);
        break;
      }
      default: {
        const name = `moving-${i}`;
        const res = await dav('PUT', `${book}${name}.vcf`, card(name, `Moving ${i}`, [`EMAIL:${name}@example.com`]), {
          ...VCARD,
          'if-none-match': '*',
        });
        if (tally('CardDAV PUT', res, 201)) cards.push(name);
      }
    }
  };
  const worker = async () => {
    while (moving !== 'after' || afterOps < 20) {
      await step();
      if (moving === 'after') afterOps++;
    }
  };
  const load = Promise.all([worker(), worker(), worker()]);
  while (n < 12) await new Promise((resolve) => setTimeout(resolve, 20));
  moving = 'during';
  const started = process.hrtime.bigint();
  await admin.query("select citus_move_shard_placement($1, $2, $3, $4, $5, 'force_logical')", [
    shard,
    '127.0.0.1',
    from,
    target.host,
    target.port,
  ]);
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  moving = 'after';
  await load;
  t.comment(`citus_move_shard_placement of alice's shard group: ${seconds.toFixed(2)} s under ${n} writes`);
  t.strictSame(await placement(), [target.port], "alice's shard is on the other worker now");
  const answers = Object.fromEntries([...statuses].sort());
  t.notOk(
    Object.keys(answers).some((key) => key.endsWith(' 500')),
    `no answer was a 500: ${JSON.stringify(answers)}`,
  );
  t.ok(
    Object.keys(answers).every((key) => /^(REST create 201|REST patch 200|REST delete 200|CardDAV PUT 201|.* 503)$/.test(key)),
    'every answer was its success or a 503 to retry',
  );

  // Every acknowledged write, exactly once.
  const list = await rest('GET', '/api/contacts/?limit=1000');
  const stored = list.json<{ id: number; email: string; phone: string }[]>();
  const byId = new Map(stored.map((c) => [c.id, c]));
  t.equal(byId.size, stored.length, 'no contact listed twice');
  t.ok(
    [...created].every(([id, email]) => byId.get(id)?.email === email),
    `every acknowledged create is there (${created.size})`,
  );
  t.ok(
    [...deleted].every((id) => !byId.has(id)),
    `every acknowledged delete is gone (${deleted.size})`,
  );
  t.ok(
    [...phones].every(([id, phone]) => byId.get(id)?.phone === phone),
    `every acknowledged patch is the latest state (${phones.size})`,
  );
  const emails = stored.map((c) => c.email.toLowerCase());
  t.equal(new Set(emails).size, emails.length, 'no e-mail stored twice');
  t.equal(stored.length, 30 + created.size + cards.length - deleted.size, 'nothing more than was acknowledged');
  for (const name of cards) if ((await dav('GET', `${book}${name}.vcf`)).statusCode !== 200) t.fail(`card ${name} is missing`);
  t.pass(`every acknowledged CardDAV PUT is there (${cards.length})`);
  t.equal((await as(app, bob)('GET', '/api/contacts/?limit=1000')).json<unknown[]>().length, bobs.length, "bob's contacts are untouched");

  // REST delta sync from the token of before the move: every change since, none skipped.
  const seen = new Map<number, string | null>();
  const gone = new Set<number>();
  for (let token = restToken!, more = true; more;) {
    const res = await rest('GET', `/api/contacts/sync?token=${encodeURIComponent(token)}`);
    t.equal(res.statusCode, 200, 'a delta page');
    const page = res.json<SyncPage>();
    for (const c of page.contacts) seen.set(c.id, c.phone);
    for (const id of page.deleted) gone.add(id);
    token = page.next_token;
    more = page.has_more;
  }
  t.ok(
    [...created.keys()].every((id) => seen.has(id)),
    'the delta has every create',
  );
  t.ok(
    [...phones].every(([id, phone]) => seen.get(id) === phone),
    'and every patch in its latest state',
  );
  t.ok(
    [...deleted].every((id) => gone.has(id)),
    'and every delete',
  );
  t.equal(seen.size, created.size + phones.size + cards.length, 'and the CardDAV PUTs, nothing else');

  // CardDAV sync-collection from the book's token of before the move.
  const synced = await dav(
    'REPORT',
    book,
    `<D:sync-collection xmlns:D="DAV:"><D:sync-token>${davToken}</D:sync-token><D:sync-level>1</D:sync-level><D:prop><D:getetag/></D:prop></D:sync-collection>`,
  );
  t.equal(synced.statusCode, 207, 'sync-collection from the earlier token');
  const hrefs = [...synced.body.matchAll(/<D:response><D:href>([^<]*)<\/D:href>/g)].map((m) => m[1]!);
  t.ok(
    cards.every((name) => hrefs.includes(`${book}${name}.vcf`)),
    'it has every card PUT since',
  );
  t.equal(hrefs.length, created.size + phones.size + deleted.size + cards.length, 'and one response for each other change');
});
