/**
 * Read-your-writes and If-None-Match across a Redis restart. Redis forgets every user's cache
 * generation when it restarts without persistence (or evicts the key); the generations that follow
 * must never come back to one for which an instance still holds an answer in memory.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { privateRedis } from '../faults/processes.js';
import { backend } from '../helper.js';
import { as, buildContactsApp, contactBody, createUser } from './fixtures.js';

t.test(
  'after a Redis restart a cached page never answers 304 to a tag the current page no longer has',
  { skip: backend !== 'postgres' && 'needs a redis-server of its own to restart' },
  async (t) => {
    const redis = await privateRedis(t);
    const app = await buildContactsApp(t, { env: { REDIS_URL: redis.url } });
    const alice = as(app, await createUser(app));
    const contact = (await alice('POST', '/api/contacts/', contactBody({ first_name: 'First' }))).json();
    const urls = ['/api/contacts/get-upcoming-birthday?time_range=366', '/api/contacts/?limit=10'];
    const tags = new Map<string, string>();
    for (const url of urls) {
      tags.set(url, (await alice('GET', url)).headers.etag as string);
      t.equal((await alice('GET', url)).headers['x-cache'], 'HIT', `${url}: cached in this process`);
    }
    t.equal((await alice('PATCH', `/api/contacts/${contact.id}`, { first_name: 'Second' })).statusCode, 200);

    await redis.kill();
    await redis.start();
    for (let attempt = 0; app.redisClient!.status !== 'ready' || (await app.redisClient!.ping().catch(() => '')) !== 'PONG'; attempt++) {
      if (attempt > 200) throw new Error('the app did not reconnect to Redis');
      await sleep(25);
    }
    t.equal((await alice('PATCH', `/api/contacts/${contact.id}`, { first_name: 'Third' })).statusCode, 200);

    for (const url of urls) {
      const conditional = await alice('GET', url, undefined, { 'if-none-match': tags.get(url)! });
      t.equal(conditional.statusCode, 200, `${url}: the first page's tag is two writes old`);
      const plain = await alice('GET', url);
      t.equal(plain.json()[0]?.first_name, 'Third', `${url}: the client reads its own write`);
    }
  },
);
