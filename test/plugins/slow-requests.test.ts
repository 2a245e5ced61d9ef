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
