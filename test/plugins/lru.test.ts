/** plugins/lru.ts: the in-process bounds hold their number of entries, forgetting the least recently used. */
import t from 'tap';
import { lru } from '../../plugins/lru.js';

t.test('at most `entries` entries: the least recently used goes first', async (t) => {
  const cache = lru<string, number>(3);
  for (const key of ['a', 'b', 'c']) cache.set(key, 1);
  t.equal(cache.get('a'), 1, 'a is used again');
  cache.set('d', 1);
  t.same([...cache.keys()].sort(), ['a', 'c', 'd'], 'b, the least recently used, is gone');
  for (let i = 0; i < 1000; i++) cache.set(`k${i}`, i);
  t.equal(cache.size, 3);
});

t.test('with a ttl, an entry is forgotten after it', async (t) => {
  const cache = lru<string, number>(10, 50);
  cache.set('a', 1);
  t.equal(cache.get('a'), 1);
  await new Promise((resolve) => setTimeout(resolve, 80));
  t.equal(cache.get('a'), undefined);
});
