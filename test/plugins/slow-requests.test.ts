/**
 * A request whose body never comes is answered 408 and its connection closed after
 * HTTP_REQUEST_TIMEOUT_MS (docs/limits.md, "Slow requests"): raw sockets against a listening app.
 */
import { once } from 'node:events';
import { connect } from 'node:net';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { build } from '../helper.js';

t.test('a login whose body never comes is 408 and closed after HTTP_REQUEST_TIMEOUT_MS', async (t) => {
  const app = await build(t, { env: { HTTP_REQUEST_TIMEOUT_MS: '1000' } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const { port } = app.server.address() as AddressInfo;
  for (const sent of ['username=alice&password=', '']) {
    const socket = connect(port, '127.0.0.1');
    socket.write(
      `POST /api/auth/login HTTP/1.1\r\nHost: contacts.test\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\n${sent}`,
    );
    let received = '';
    socket.setEncoding('utf8').on('data', (chunk: string) => (received += chunk));
    await once(socket, 'close');
    const [head, body] = received.split('\r\n\r\n');
    t.match(head, /^HTTP\/1\.1 408 Request Timeout\r\n/, `${sent.length} of 100 bytes sent`);
    t.match(head, /\r\nConnection: close(\r\n|$)/i);
    t.equal(body, JSON.stringify({ detail: 'Request timeout' }));
  }
});

t.test('an import refused mid-body (413) is answered to a client that goes on sending', async (t) => {
  const app = await build(t);
  await app.listen({ host: '127.0.0.1', port: 0 });
  const { port } = app.server.address() as AddressInfo;
  const token = app.tokens.sign(
    (
      await app.db
        .insertInto('users')
        .values({ username: 'linger', email: 'linger@example.com', password_hash: 'not-a-hash', is_verified: true })
        .returning('id')
        .executeTakeFirstOrThrow()
    ).id,
    'access',
    900,
  );
  const size = 12 * 1024 * 1024;
  const chunk = Buffer.alloc(64 * 1024, 'BEGIN:VCARD\r\nFN:x\r\nEND:VCARD\r\n');
  // The same check failed once in two runs before: a few runs.
  for (let run = 1; run <= 4; run++) {
    const socket = connect(port, '127.0.0.1');
    const errors: string[] = [];
    socket.on('error', (error: NodeJS.ErrnoException) => errors.push(error.code ?? error.message));
    let received = '';
    socket.setEncoding('utf8').on('data', (data: string) => (received += data));
    socket.write(
      `POST /api/contacts/import HTTP/1.1\r\nHost: contacts.test\r\nAuthorization: Bearer ${token}\r\n` +
        `Content-Type: text/vcard\r\nContent-Length: ${size}\r\n\r\n`,
    );
    // The whole body, as a client that does not look for an early answer sends it.
    for (let sent = 0; sent < size && errors.length === 0; sent += chunk.length) {
      if (!socket.write(chunk)) await Promise.race([once(socket, 'drain'), once(socket, 'close')]);
    }
    while (!received.includes('\r\n\r\n{') || !received.endsWith('}')) {
      if (socket.destroyed) break;
      await Promise.race([once(socket, 'data'), once(socket, 'close')]);
    }
    socket.destroy();
    t.same(errors, [], `run ${run}: no reset while sending`);
    t.match(received, /^HTTP\/1\.1 413 Payload Too Large\r\n/, `run ${run}: the 413 arrived`);
    t.equal(received.split('\r\n\r\n')[1], JSON.stringify({ detail: 'Request body is too large' }));
  }
});
