/**
 * A real TCP proxy in front of a listening service, for the retries of Idempotency-Key: it can lose
 * answers (the request was handled, its answer never reaches the client), cut the connections it
 * holds, and refuse connections for a while, as a network or a load balancer does.
 */
import { once } from 'node:events';
import { createServer, connect, type Socket } from 'node:net';
import type { Teardown } from '../helper.js';

export interface AnswerDroppingProxy {
  /** `http://127.0.0.1:<port>`: the service through the proxy. */
  url: string;
  /** The next `count` answers are lost: the client's connection is cut when an answer starts to come. */
  dropAnswers(count: number): void;
  /** Cuts every connection open now, in both directions. */
  cutAll(): void;
  /** Stops taking connections (they are refused) until `resume`; open ones are cut. */
  pause(): Promise<void>;
  resume(): Promise<void>;
  /** Answers lost so far. */
  readonly dropped: number;
}

export async function answerDroppingProxy(t: Teardown, targetPort: number): Promise<AnswerDroppingProxy> {
  const open = new Set<Socket>();
  let toDrop = 0;
  let dropped = 0;
  const server = createServer((client) => {
    const upstream = connect(targetPort, '127.0.0.1');
    for (const socket of [client, upstream]) {
      open.add(socket);
      socket.on('close', () => open.delete(socket));
      // A cut connection errors on the other side too; the test looks at what the client got.
      socket.on('error', () => {});
    }
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
    client.pipe(upstream);
    upstream.on('data', (chunk: Buffer) => {
      if (toDrop > 0) {
        toDrop--;
        dropped++;
        client.destroy();
        upstream.destroy();
      } else {
        client.write(chunk);
      }
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  const cutAll = () => {
    for (const socket of open) socket.destroy();
  };
  t.teardown(async () => {
    cutAll();
    if (server.listening) await new Promise((resolve) => server.close(resolve));
  });
  return {
    url: `http://127.0.0.1:${port}`,
    dropAnswers(count) {
      toDrop = count;
    },
    cutAll,
    async pause() {
      const closed = new Promise((resolve) => server.close(resolve));
      cutAll();
      await closed;
    },
    async resume() {
      server.listen(port, '127.0.0.1');
      await once(server, 'listening');
    },
    get dropped() {
      return dropped;
    },
  };
}
