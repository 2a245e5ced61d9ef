/**
 * Two service processes over a private primary with one streaming standby that applies each commit
 * 3 s late (DATABASE_READ_URLS), sharing one Redis: a user who writes through one instance reads,
 * lists, syncs and PROPFINDs their writes at once through the other, although the standby does not
 * hold them yet; another user's reads run on the standby; and with the standby killed every read
 * still succeeds, on the primary.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import t from 'tap';
import { derivedCardName } from '../../src/contacts/cards.js';
import {
  privatePostgres,
  privateRedis,
  processTestsUnavailable,
  scratchDir,
  type Service,
  serviceEnv,
  signUp,
  startService,
} from '../faults/processes.js';
import { backend, smtpCapture } from '../helper.js';
import { parseExposition, sampleValue } from '../plugins/exposition.js';
import { privateStandby } from '../standby.js';

const APPLY_DELAY_MS = 3_000;

interface Contact {
  id: number;
  first_name: string;
  email: string;
}

t.test(
  'reads on a delayed standby never show a user a view older than their own writes',
  { skip: processTestsUnavailable(backend) },
  async (t) => {
    const started = Date.now();
    const [primary, redis, mailbox, dataA, dataB] = await Promise.all([
      privatePostgres(t),
      privateRedis(t),
      smtpCapture(t),
      scratchDir(t),
      scratchDir(t),
    ]);
    const standby = await privateStandby(t, primary.url, APPLY_DELAY_MS);
    const extra = { REDIS_URL: redis.url, DATABASE_READ_URLS: standby.url };
    const [a, b] = await Promise.all([
      startService(t, serviceEnv(primary.url, mailbox.url, dataA, extra)),
      startService(t, serviceEnv(primary.url, mailbox.url, dataB, extra)),
    ]);
    t.comment(`primary, standby and two instances up in ${Date.now() - started} ms`);
    const onStandby = new pg.Client({ connectionString: standby.url });
    onStandby.on('error', () => undefined);
    await onStandby.connect();
    t.teardown(() => onStandby.end().catch(() => undefined));
    // The instances made the schema on the primary; the standby applies it only after its delay.
    const onPrimary = new pg.Client({ connectionString: primary.url });
    await onPrimary.connect();
    const { rows } = await onPrimary.query<{ lsn: string }>('select pg_current_wal_lsn() as lsn');
    await onPrimary.end();
    while (
      !(await onStandby.query<{ caught: boolean }>('select pg_last_wal_replay_lsn() >= $1::pg_lsn as caught', [rows[0]!.lsn])).rows[0]!
        .caught
    )
      await sleep(100);

    const call = (service: Service, path: string, token: string, init: RequestInit = {}) =>
      fetch(`${service.url}${path}`, {
        ...init,
        headers: {
          Authorization: `Bearer ${token}`,
          ...(typeof init.body === 'string' && !init.method?.startsWith('PROP') ? { 'Content-Type': 'application/json' } : {}),
          ...init.headers,
        },
      });
    const json = async <T>(response: Response, status = 200): Promise<T> => {
      t.equal(response.status, status, `${response.url}: ${status}`);
      return (await response.json()) as T;
    };
    const reads = async (service: Service) => {
      const samples = parseExposition(await (await fetch(`${service.url}/metrics`)).text());
      return {
        standby: sampleValue(samples, 'contacts_db_reads_total', { node: 'standby' }),
        primary: sampleValue(samples, 'contacts_db_reads_total', { node: 'primary' }),
        leftOut: sampleValue(samples, 'contacts_db_standbys', { state: 'left_out' }),
      };
    };
    /** How many of `ids` the standby holds (with this first name). */
    const onStandbyCount = async (ids: number[], firstName?: string) =>
      Number(
        (
          await onStandby.query('select count(*) from contacts where id = any($1) and first_name = coalesce($2, first_name)', [
            ids,
            firstName,
          ])
        ).rows[0].count,
      );

    const writer = await signUp(a.url, mailbox, 'writer');
    const reader = await signUp(a.url, mailbox, 'reader');
    const writerId = (await json<{ id: number }>(await call(a, '/api/users/me', writer))).id;

    // The reader's contacts, written first, so that the standby has them by the time they are read.
    const readerContacts: Contact[] = [];
    for (let i = 0; i < 3; i++) {
      const body = JSON.stringify({
        first_name: `Reader${i}`,
        last_name: 'R',
        email: `r${i}@example.com`,
        phone: '+14155550100',
        birthday: '1990-01-01',
      });
      readerContacts.push(await json<Contact>(await call(a, '/api/contacts/', reader, { method: 'POST', body }), 201));
    }

    let syncToken = (await json<{ next_token: string }>(await call(b, '/api/contacts/sync', writer))).next_token;
    const book = `/dav/addressbooks/${writerId}/contacts/`;
    const propfind = async () => {
      const response = await call(b, book, writer, {
        method: 'PROPFIND',
        headers: { Depth: '1', 'Content-Type': 'application/xml' },
        body: '<?xml version="1.0"?><D:propfind xmlns:D="DAV:"><D:prop><D:getetag/></D:prop></D:propfind>',
      });
      t.equal(response.status, 207, 'PROPFIND through the other instance');
      return (await response.text()).replaceAll('&quot;', '"');
    };
    /** Every way the other instance reads `contact`: it is there, as the writing instance answered it. */
    const seenEverywhere = async (contact: Contact, etag: string) => {
      const got = await call(b, `/api/contacts/${contact.id}`, writer);
      t.strictSame(await json(got), contact, 'get through the other instance');
      t.equal(got.headers.get('etag'), etag);
      const listed = await json<Contact[]>(await call(b, '/api/contacts/?limit=100', writer));
      t.strictSame(
        listed.find((c) => c.id === contact.id),
        contact,
        'listed through the other instance',
      );
      const delta = await json<{ contacts: Contact[]; next_token: string }>(await call(b, `/api/contacts/sync?token=${syncToken}`, writer));
      t.strictSame(
        delta.contacts.find((c) => c.id === contact.id),
        contact,
        'synced through the other instance',
      );
      syncToken = delta.next_token;
      t.ok((await propfind()).includes(etag), 'its ETag in a PROPFIND through the other instance');
      const card = await call(b, `${book}${derivedCardName(contact.id)}`, writer);
      t.equal(card.status, 200, 'its card through the other instance');
      t.equal(card.headers.get('etag'), etag);
      await card.arrayBuffer();
    };

    for (let i = 0; i < 2; i++) {
      const body = JSON.stringify({
        first_name: `Writer${i}`,
        last_name: 'W',
        email: `w${i}@example.com`,
        phone: '+14155550101',
        birthday: '1990-01-01',
      });
      const createdResponse = await call(a, '/api/contacts/', writer, { method: 'POST', body });
      const created = await json<Contact>(createdResponse, 201);
      t.equal(await onStandbyCount([created.id]), 0, 'the standby does not hold the new contact yet');
      await seenEverywhere(created, createdResponse.headers.get('etag')!);

      const patchedResponse = await call(a, `/api/contacts/${created.id}`, writer, {
        method: 'PATCH',
        body: JSON.stringify({ first_name: `Patched${i}` }),
      });
      const patched = await json<Contact>(patchedResponse);
      t.equal(await onStandbyCount([created.id], patched.first_name), 0, 'the standby does not hold the patch yet');
      await seenEverywhere(patched, patchedResponse.headers.get('etag')!);

      const deleted = await call(a, `/api/contacts/${created.id}`, writer, { method: 'DELETE' });
      t.equal(deleted.status, 200);
      await deleted.arrayBuffer();
      t.equal((await call(b, `/api/contacts/${created.id}`, writer)).status, 404, 'deleted, through the other instance');
      const listed = await json<Contact[]>(await call(b, '/api/contacts/?limit=100', writer));
      t.notOk(
        listed.some((c) => c.id === created.id),
        'not listed through the other instance',
      );
      const delta = await json<{ deleted: number[]; next_token: string }>(await call(b, `/api/contacts/sync?token=${syncToken}`, writer));
      t.ok(delta.deleted.includes(created.id), 'its deletion synced through the other instance');
      syncToken = delta.next_token;
      t.notOk((await propfind()).includes(derivedCardName(created.id)), 'its card gone from a PROPFIND through the other instance');
    }

    // The reader wrote nothing for a while: once the standby replayed their contacts, their reads run there.
    while ((await onStandbyCount(readerContacts.map((c) => c.id))) < readerContacts.length) await sleep(100);
    const before = await reads(b);
    for (let limit = 1; limit <= 10; limit++) {
      const listed = await json<Contact[]>(await call(b, `/api/contacts/?limit=${limit}`, reader));
      t.equal(listed.length, Math.min(limit, readerContacts.length));
    }
    const after = await reads(b);
    t.equal(after.standby - before.standby, 10, "the reader's ten uncached lists ran on the standby");
    t.equal(after.primary - before.primary, 0);

    await standby.kill();
    for (let limit = 11; limit <= 20; limit++) {
      const listed = await json<Contact[]>(await call(b, `/api/contacts/?limit=${limit}`, reader));
      t.equal(listed.length, readerContacts.length, 'a read with the standby killed');
    }
    const killed = await reads(b);
    t.equal(killed.primary - after.primary, 10, 'each ran on the primary');
    t.equal(killed.standby - after.standby, 0);
    t.equal(killed.leftOut, 1, 'the standby is left out');
    t.comment(`done in ${Date.now() - started} ms`);
  },
);
