/** RenderQueue on its own: one render at a time, the others in order, at most `limit` waiting. */
import t from 'tap';
import { RenderQueue, RenderQueueFull } from '../../src/avatars/render-queue.js';

/** A render that ends when told to, noting when it ran. */
function pendingRender(log: string[], name: string): { render: () => Promise<string>; finish: () => void } {
  let finish!: () => void;
  const done = new Promise<void>((resolve) => (finish = resolve));
  return {
    render: async () => {
      log.push(`${name} starts`);
      await done;
      log.push(`${name} ends`);
      return name;
    },
    finish: () => finish(),
  };
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

t.test('one at a time, in order; past the limit refused at once with a Retry-After; a failure passes the turn on', async (t) => {
  const queue = new RenderQueue();
  const log: string[] = [];
  const [a, b, c] = ['a', 'b', 'c'].map((name) => pendingRender(log, name));
  const running = [queue.run(2, a!.render), queue.run(2, b!.render), queue.run(2, c!.render)];
  await settle();
  t.same(log, ['a starts'], 'b and c wait');
  const refused = await queue.run(2, async () => 'd').catch((error: unknown) => error);
  t.ok(refused instanceof RenderQueueFull, 'a fourth is refused: two already wait');
  t.equal((refused as RenderQueueFull).statusCode, 503);
  t.same((refused as RenderQueueFull).headers, { 'Retry-After': 1 });
  a!.finish();
  await settle();
  t.same(log, ['a starts', 'a ends', 'b starts'], 'the turn passes to b');
  b!.finish();
  c!.finish();
  t.same(await Promise.all(running), ['a', 'b', 'c']);
  t.same(log, ['a starts', 'a ends', 'b starts', 'b ends', 'c starts', 'c ends']);
  await t.rejects(
    queue.run(0, async () => Promise.reject(new Error('broken'))),
    /broken/,
  );
  t.equal(await queue.run(0, async () => 'next'), 'next', 'a failed render frees the queue');
});
