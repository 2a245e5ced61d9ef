import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { Cluster, Redis, type RedisOptions } from 'ioredis';
import { outageLog } from './outage-log.js';

/** One Redis server (REDIS_URL) or a Redis Cluster (REDIS_CLUSTER_URLS): the same commands either way. */
export type RedisClient = Redis | Cluster;

/** What a subscription tells its owner. */
export interface SubscriptionHandlers {
  message: (text: string) => void;
  /** true once SUBSCRIBE is confirmed, false as soon as the connection is lost (messages may then be missed). */
  listening: (yes: boolean) => void;
}

/**
 * Keeps a connection of its own subscribed to `channel` (a subscribed connection can issue no other
 * command), reconnecting for as long as the app runs. Resolves after the first attempt, subscribed or not.
 */
export type RedisSubscribe = (channel: string, handlers: SubscriptionHandlers) => Promise<void>;

/** Publishes `message` on `channel` to every subscription; rejects when no node took it. */
export type RedisPublish = (channel: string, message: string) => Promise<void>;

declare module 'fastify' {
  interface FastifyInstance {
    /** The shared Redis connection; null when neither REDIS_URL nor REDIS_CLUSTER_URLS is set. */
    redisClient: RedisClient | null;
    /** Subscribes to a channel every instance publishes to; null without Redis. */
    redisSubscribe: RedisSubscribe | null;
    /** Publishes to the subscriptions of every instance; null without Redis. */
    redisPublish: RedisPublish | null;
  }
}

/**
 * The hash tag of user `userId`'s keys. A Redis Cluster hashes only the part in braces, so every
 * key carrying it lives in one slot, and a script may touch several of them (the cache's read does).
 */
export const userTag = (userId: number | string) => `{u${userId}}`;

/** How long start-up waits for a first connection before serving without Redis. */
const CONNECT_WAIT_MS = 2_000;

/** Reconnect forever, backing off to one attempt a second. */
const reconnectDelay = (attempt: number) => Math.min(attempt * 100, 1_000);

/** Resolves when Redis answers: a PING, or on a cluster `cluster_state:ok` (every slot served); rejects otherwise. */
export async function redisAnswers(client: RedisClient): Promise<void> {
  if (!(client instanceof Cluster)) {
    await client.ping();
    return;
  }
  const info = await client.cluster('INFO');
  if (!/^cluster_state:ok\r?$/m.test(info)) throw new Error(`redis cluster state is not ok: ${/^cluster_state:(\w+)/m.exec(info)?.[1]}`);
}

/** Host and port of a seed URL; the brackets of an IPv6 address go. */
function nodeOf(url: URL): { host: string; port: number } {
  return { host: url.hostname.replace(/^\[(.*)\]$/, '$1'), port: Number(url.port || 6379) };
}

/**
 * A Cluster client as fail-fast as the single connection: a command for a master that is gone
 * (or while the cluster is down) fails at once instead of being retried for up to 16 × 100 ms, so
 * REDIS_COMMAND_TIMEOUT_MS still bounds what any command costs. Every node takes the first URL's
 * credentials and TLS.
 */
function clusterClient(urls: string[], nodeOptions: RedisOptions): { client: Cluster; nodes: () => RedisOptions[] } {
  const seeds = urls.map((url) => new URL(url));
  const first = seeds[0]!;
  const shared: RedisOptions = {
    ...nodeOptions,
    ...(first.username && { username: decodeURIComponent(first.username) }),
    ...(first.password && { password: decodeURIComponent(first.password) }),
    ...(first.protocol === 'rediss:' && { tls: {} }),
  };
  const client = new Cluster(seeds.map(nodeOf), {
    lazyConnect: true,
    enableOfflineQueue: false,
    enableAutoPipelining: true,
    clusterRetryStrategy: reconnectDelay,
    retryDelayOnFailover: 0,
    retryDelayOnClusterDown: 0,
    redisOptions: shared,
  });
  // The seeds first, then every node the cluster has told of (a replica promoted since, say).
  const nodes = () => {
    const known = [...seeds.map(nodeOf), ...client.nodes('all').map(({ options }) => ({ host: options.host!, port: options.port! }))];
    const unique = new Map(known.map((node) => [`${node.host}:${node.port}`, node]));
    return [...unique.values()].map((node) => ({ ...shared, ...node }));
  };
  return { client, nodes };
}

/**
 * A subscription that outlives connections: each attempt opens a connection to the next of
 * `open`'s nodes, and its loss is reported and followed by another attempt. On a cluster any node
 * will do, since every node hears every PUBLISH; trying the next one after a loss moves the
 * subscription off a master that died.
 */
function subscriptions(open: (attempt: number) => Redis): { subscribe: RedisSubscribe; close(): void } {
  const live = new Set<{ close(): void }>();
  const subscribe: RedisSubscribe = (channel, { message, listening }) => {
    let closed = false;
    let attempts = 0;
    let failures = 0;
    let connection: Redis | undefined;
    let retry: NodeJS.Timeout | undefined;
    const attempt = (): Promise<void> => {
      const current = open(attempts++);
      connection = current;
      // Reported by 'end'; the shared connection logs the outage.
      current.on('error', () => undefined);
      current.on('message', (_channel: string, text: string) => message(text));
      current.once('end', () => {
        listening(false);
        if (closed) return;
        retry = setTimeout(() => void attempt(), reconnectDelay(++failures));
      });
      return current
        .connect()
        .then(() => current.subscribe(channel))
        .then(
          () => {
            failures = 0;
            listening(true);
          },
          () => current.disconnect(),
        );
    };
    live.add({
      close() {
        closed = true;
        clearTimeout(retry);
        connection?.disconnect();
      },
    });
    return attempt();
  };
  return { subscribe, close: () => live.forEach((subscription) => subscription.close()) };
}

/** Logs Redis going away and coming back, and tells /metrics whether it answers. */
function watch(app: FastifyInstance, client: RedisClient): void {
  const messages = { down: 'redis unavailable; serving without it', up: 'redis reachable again' };
  if (client instanceof Cluster) {
    // A node that is gone fails every connection to it (each command redirected there makes one): the outage ends once none has failed for a second.
    const outage = outageLog(app.log, messages, 1_000);
    client.on('error', (error: Error) => outage.failed(error));
    client.on('node error', (error: Error) => outage.failed(error));
    client.on('ready', () => outage.answered());
    client.on('refresh', () => outage.answered());
    // The client stays ready while one master is away; the cluster's own state says whether every slot is served.
    app.metrics.dependency('redis', () =>
      redisAnswers(client).then(
        () => true,
        () => false,
      ),
    );
    return;
  }
  // Without a listener ioredis reports every failed reconnect as an unhandled error; one warning per outage is enough.
  const outage = outageLog(app.log, messages);
  client.on('error', (error: Error) => outage.failed(error));
  client.on('ready', () => outage.answered());
  app.metrics.dependency('redis', () => client.status === 'ready');
}

/**
 * `app.redisClient`: one ioredis connection (or Cluster client) that fails fast while Redis is
 * down (no offline queue, short command timeout) and keeps reconnecting in the background. The app
 * starts even when Redis is unreachable; callers treat every command as fallible.
 * `contacts_dependency_up{dependency="redis"}` is whether the connection is ready, or on a
 * cluster whether it says `cluster_state:ok`.
 *
 * Not @fastify/redis: it blocks start-up until Redis answers, so an instance could not start (or
 * restart) during a Redis outage, although everything Redis holds here is optional.
 */
export default fp(
  async (app) => {
    const { redisUrl, redisClusterUrls } = app.config;
    if (!redisUrl && !redisClusterUrls) {
      app.decorate('redisClient', null);
      app.decorate('redisSubscribe', null);
      app.decorate('redisPublish', null);
      return;
    }
    const nodeOptions: RedisOptions = {
      lazyConnect: true,
      enableOfflineQueue: false,
      // A slow Redis costs a request little: past this the command fails and the request goes on without it.
      commandTimeout: app.config.redisCommandTimeoutMs,
      connectTimeout: CONNECT_WAIT_MS,
      maxRetriesPerRequest: 0,
    };
    let client: RedisClient;
    let open: (attempt: number) => Redis;
    let publish: RedisPublish;
    if (redisClusterUrls) {
      const cluster = clusterClient(redisClusterUrls, nodeOptions);
      client = cluster.client;
      open = (attempt) => {
        const nodes = cluster.nodes();
        return new Redis({ ...nodes[attempt % nodes.length], retryStrategy: () => null });
      };
      // To every node, rather than to one that passes it on over the cluster bus: each node hands
      // it to its own subscribers before it answers, so, as on one Redis, every subscription has
      // it by the time the publish is acknowledged.
      publish = async (channel, message) => {
        const sent = await Promise.allSettled(cluster.client.nodes('all').map((node) => node.publish(channel, message)));
        const failed = sent.find((result) => result.status === 'rejected');
        if (!sent.some((result) => result.status === 'fulfilled')) throw failed?.reason ?? new Error('no redis cluster node is known');
      };
    } else {
      client = new Redis(redisUrl!, {
        ...nodeOptions,
        // Commands issued in the same tick (concurrent requests' cache reads) leave in one write.
        enableAutoPipelining: true,
        retryStrategy: reconnectDelay,
      });
      open = () => new Redis(redisUrl!, { ...nodeOptions, retryStrategy: () => null });
      const single = client;
      publish = async (channel, message) => void (await single.publish(channel, message));
    }
    watch(app, client);

    let timer: NodeJS.Timeout | undefined;
    const gaveUp = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, CONNECT_WAIT_MS);
    });
    // A cluster's connect() never settles when its first ready check fails; the wait bounds it.
    await Promise.race([client.connect().catch(() => undefined), gaveUp]);
    clearTimeout(timer);
    if (client.status !== 'ready') app.log.warn({ status: client.status }, 'redis not reachable at start-up; serving without it');

    const subscribers = subscriptions(open);
    app.decorate<RedisClient | null>('redisClient', client);
    app.decorate('redisSubscribe', subscribers.subscribe);
    app.decorate('redisPublish', publish);
    app.addHook('onClose', async () => {
      subscribers.close();
      // quit() waits for pending replies; when the server is gone there are none worth waiting for.
      if (client.status === 'ready') await client.quit().catch(() => client.disconnect());
      else client.disconnect();
    });
  },
  { name: 'redis', dependencies: ['config', 'metrics'], fastify: '5.x' },
);
