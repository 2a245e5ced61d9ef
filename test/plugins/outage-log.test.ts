/** The outage log: one warning when a dependency goes away, one info line when it is back. */
import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyBaseLogger } from 'fastify';
import t from 'tap';
import { outageLog } from '../../plugins/outage-log.js';

function recordingLogger(): { log: FastifyBaseLogger; lines: [string, unknown[]][] } {
  const lines: [string, unknown[]][] = [];
  const log = {
    warn: (...args: unknown[]) => lines.push(['warn', args]),
    info: (...args: unknown[]) => lines.push(['info', args]),
  } as unknown as FastifyBaseLogger;
  return { log, lines };
}

const messages = { down: 'thing unavailable', up: 'thing back' };

t.test('one warning per outage, one info line at its end, nothing while all is well', async (t) => {
  const { log, lines } = recordingLogger();
  const outage = outageLog(log, messages);
  outage.answered();
  t.same(lines, [], 'no outage, nothing to say');
  const error = new Error('refused');
  for (let i = 0; i < 100; i++) outage.failed(error);
  t.same(lines, [['warn', [{ err: error }, 'thing unavailable']]]);
  outage.answered();
  outage.answered();
  t.same(lines.slice(1), [['info', ['thing back']]]);
  outage.failed(error);
  t.equal(lines.length, 3, 'a new outage is a new warning');
});

t.test('with settleMs, failures right after a first success belong to the same outage', async (t) => {
  const { log, lines } = recordingLogger();
  const outage = outageLog(log, messages, 50);
  outage.failed(new Error('refused'));
  outage.answered();
  outage.failed(new Error('starting up'));
  outage.answered();
  t.equal(lines.length, 1, 'still the first warning only');
  await sleep(100);
  t.same(
    lines.map(([level]) => level),
    ['warn', 'info'],
    'the end is logged once things stay well',
  );
});
