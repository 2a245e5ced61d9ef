import fp from 'fastify-plugin';
import { Redis } from 'ioredis';
import { outageLog } from './outage-log.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** The shared Redis connection; null when REDIS_URL is unset. */
    redisClient: Redis | null;
  }
}

/** How long start-up waits for a first connection before serving without Redis. */
const CONNECT_WAIT_MS = 2_000;

/**
 * `app.redisClient`: one ioredis connection that fails fast while Redis is down (no offline queue,
 * short command timeout) and keeps reconnecting in the background. The app starts even when Redis
 * is unreachable; callers treat every command as fallible. `contacts_dependency_up{dependency="redis"}`
 * is whether the connection is ready.
 *
 * Not @fastify/redis: it blocks start-up until Redis answers, so an instance could not start (or
 * restart) during a Redis outage, although everything Redis holds here is optional.
 */
export default fp(
  async (app) => {
    const url = app.config.redisUrl;
    if (!url) {
      app.decorate('redisClient', null);
      return;
    }
    const client = new Redis(url, {
      lazyConnect: true,
      enableOfflineQueue: false,
      // A slow Redis costs a request little: past this the command fails and the request goes on without it.
      commandTimeout: app.config.redisCommandTimeoutMs,
      connectTimeout: CONNECT_WAIT_MS,
      maxRetriesPerRequest: 0,
      // Commands issued in the same tick (concurrent requests' cache reads) leave in one write.
      enableAutoPipelining: true,
      // Reconnect forever, backing off to one attempt a second.
      retryStrategy: (attempt) => Math.min(attempt * 100, 1_000),
    });
    // Without a listener ioredis reports every failed reconnect as an unhandled error; one warning per outage is enough.
    const outage = outageLog(app.log, { down: 'redis unavailable; serving without it', up: 'redis reachable again' });
    client.on('error', (error: Error) => outage.failed(error));
    client.on('ready', () => outage.answered());

    let timer: NodeJS.Timeout | undefined;
    const gaveUp = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, CONNECT_WAIT_MS);
    });
    await Promise.race([client.connect().catch(() => undefined), gaveUp]);
    clearTimeout(timer);
    if (client.status !== 'ready') app.log.warn({ status: client.status }, 'redis not reachable at start-up; serving without it');

    app.decorate('redisClient', client);
    app.metrics.dependency('redis', () => client.status === 'ready');
    app.addHook('onClose', async () => {
      // quit() waits for pending replies; when the server is gone there are none worth waiting for.
      if (client.status === 'ready') await client.quit().catch(() => client.disconnect());
      else client.disconnect();
    });
  },
  { name: 'redis', dependencies: ['config', 'metrics'], fastify: '5.x' },
);
