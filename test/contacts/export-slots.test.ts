import { readdir, readlink } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { sql } from 'kysely';
import t, { type Test } from 'tap';
import { as, buildContactsApp, createUser, type TestUser } from './fixtures.js';

/** Spool files of exports this process holds open (they are unlinked at once, so "(deleted)"). */
async function openSpools(): Promise<number> {
  let spools = 0;
  for (const fd of await readdir('/proc/self/fd')) {
    const target = await readlink(`/proc/self/fd/${fd}`).catch(() => '');
    if (target.includes('contacts-export-')) spools++;
  }
  return spools;
}

/** Waits until `condition` holds; fails after `seconds` (a bound for a loaded machine, not a measurement). */
async function until(t: Test, label: string, condition: () => Promise<boolean>, seconds = 60): Promise<void> {
  const deadline = Date.now() + seconds * 1000;
  while (!(await condition())) {
    if (Date.now() > deadline) {
      t.fail(`${label}: not within ${seconds} s`);
      return;
    }
    await sleep(50);
  }
}

/** `n` contacts of about 8 KB each as CSV rows, written straight to the database. */
async function bigBook(app: FastifyInstance, ownerId: number, n: number): Promise<void> {
  await sql`
    insert into contacts (owner_id, first_name, last_name, email, phone, birthday, additional_data)
      select ${ownerId}::integer, 'Ann', 'Lee', 'c' || g || '@example.com', '+14155550123', '1990-01-02', jsonb_build_object('note', repeat('x', 8000))
        from generate_series(1, ${n}::integer) g`.execute(app.db);
}

/** An export request on a socket of its own that reads nothing until `resume` is called. */
function stalledExport(
  port: number,
  user: TestUser,
): { socket: Socket; closed: Promise<void>; received: () => Buffer; receivedBytes: () => number; resume: () => void } {
  const socket = connect(port, '127.0.0.1');
  socket.write(`GET /api/contacts/export?format=csv HTTP/1.1\r\nHost: contacts.test\r\nAuthorization: Bearer ${user.token}\r\n\r\n`);
  const chunks: Buffer[] = [];
  let bytes = 0;
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  socket.on('error', () => undefined);
  return {
    socket,
    closed,
    received: () => Buffer.concat(chunks),
    // A count, not a copy: a check after every chunk of 24 MB must not copy it all each time.
    receivedBytes: () => bytes,
    resume: () =>
      socket.on('data', (chunk: Buffer) => {
        chunks.push(chunk);
        bytes += chunk.length;
      }),
  };
}

function refused(t: Test, res: LightMyRequestResponse, status: number, detail: string) {
  t.equal(res.statusCode, status, detail);
  t.equal(res.headers['retry-after'], '5');
  t.equal(res.body, JSON.stringify({ detail }));
}

t.test('a stalled reader holds its slot until EXPORT_SEND_TIMEOUT_MS cuts it; then its spool is freed', async (t) => {
  const app = await buildContactsApp(t, {
    env: { EXPORT_CONCURRENT_PER_USER: '1', EXPORT_CONCURRENT_PER_INSTANCE: '1', EXPORT_SEND_TIMEOUT_MS: '1500' },
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const { port } = app.server.address() as { port: number };
  const alice = await createUser(app);
  const bob = await createUser(app);
  // About 24 MB: more than the sockets' buffers on both ends hold, so the send stalls.
  await bigBook(app, alice.id, 3000);
  t.equal(await openSpools(), 0);

  const stalled = stalledExport(port, alice);
  t.teardown(() => stalled.socket.destroy());
  await until(t, 'the export is spooled', async () => (await openSpools()) === 1);

  refused(
    t,
    await as(app, alice)('GET', '/api/contacts/export'),
    429,
    'Too many exports in progress: at most 1 at once per user; retry when one has finished',
  );
  refused(t, await as(app, bob)('GET', '/api/contacts/export'), 503, 'Too many exports in progress on this instance; try again later');

  await until(t, 'the stalled export is cut and its spool closed', async () => (await openSpools()) === 0);
  // Reading again, the client gets what the buffers held, then the end: short of Content-Length.
  stalled.resume();
  await stalled.closed;
  const answer = stalled.received();
  const headerEnd = answer.indexOf('\r\n\r\n');
  const head = answer.subarray(0, headerEnd).toString('latin1');
  t.match(head, /^HTTP\/1\.1 200 OK\r\n/);
  const length = Number(/\r\ncontent-length: (\d+)/i.exec(head)?.[1]);
  t.ok(length > 20_000_000, `Content-Length ${length}`);
  const got = answer.length - headerEnd - 4;
  t.ok(got < length, `cut short: ${got} of ${length} bytes`);

  // The slot is free again, for the same user and for another.
  const again = await as(app, alice)('GET', '/api/contacts/export?format=csv');
  t.equal(again.statusCode, 200);
  t.equal(again.rawPayload.length, length);
  // The slot goes back when the spool closes, just after the last byte is sent.
  await until(t, 'the sent spool is closed', async () => (await openSpools()) === 0);
  t.equal((await as(app, bob)('GET', '/api/contacts/export')).statusCode, 200);
});

t.test('a reader that keeps taking bytes is not cut, however long the whole download takes', async (t) => {
  const app = await buildContactsApp(t, { env: { EXPORT_SEND_TIMEOUT_MS: '3000' } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const { port } = app.server.address() as { port: number };
  const user = await createUser(app);
  await bigBook(app, user.id, 3000);
  const whole = (await as(app, user)('GET', '/api/contacts/export?format=csv')).rawPayload.length;
  await until(t, 'the first export gives its slot back', async () => (await openSpools()) === 0);
  const slow = stalledExport(port, user);
  t.teardown(() => slow.socket.destroy());
  // A pause of 700 ms (under the timeout) after every 4 MB: six or more pauses, longer in all than the timeout.
  let nextPause = 4_000_000;
  slow.resume();
  slow.socket.on('data', () => {
    if (slow.receivedBytes() < nextPause) return;
    nextPause += 4_000_000;
    slow.socket.pause();
    setTimeout(() => slow.socket.resume(), 700);
  });
  // Once the count passes the body's length, the head's length tells whether all of it is here.
  const arrived = async () => slow.receivedBytes() > whole && slow.receivedBytes() - slow.received().indexOf('\r\n\r\n') - 4 === whole;
  await Promise.race([until(t, 'the whole file arrives', arrived, 90), slow.closed]);
  const answer = slow.received();
  const headerEnd = answer.indexOf('\r\n\r\n');
  t.match(answer.subarray(0, headerEnd).toString('latin1'), new RegExp(`^HTTP/1\\.1 200 OK\r\n[^]*\r\ncontent-length: ${whole}\r\n`, 'i'));
  t.equal(answer.length - headerEnd - 4, whole, 'every byte arrived');
  t.ok(nextPause > 24_000_000, 'it paused all along');
  await until(t, 'its spool is closed', async () => (await openSpools()) === 0);
});

t.test('EXPORT_SPOOL_MAX_BYTES: an export that would pass it is 503, and its spool freed', async (t) => {
  const app = await buildContactsApp(t, { env: { EXPORT_SPOOL_MAX_BYTES: String(1024 * 1024) } });
  const big = await createUser(app);
  const small = await createUser(app);
  await bigBook(app, big.id, 200);
  await bigBook(app, small.id, 10);
  refused(
    t,
    await as(app, big)('GET', '/api/contacts/export?format=csv'),
    503,
    'Too much export data in flight on this instance; try again later, or export fewer contacts with `query`',
  );
  t.equal(await openSpools(), 0, 'the spool is closed');
  // Its bytes went back: a smaller export fits, as does a narrower one of the same user.
  t.equal((await as(app, small)('GET', '/api/contacts/export?format=csv')).statusCode, 200);
  t.equal(
    (await as(app, big)('GET', `/api/contacts/export?format=csv&query=${encodeURIComponent('email:eq:c7@example.com')}`)).statusCode,
    200,
  );
});
