/**
 * `npm run bench:carddav-bounds -- [--cards 200] [--card-kib 250] [--concurrent 8]`
 *
 * The bounds of the CardDAV face (docs/limits.md, "CardDAV") on the compiled service, a process of
 * its own on its own PostgreSQL database:
 * - memory: a book of `--cards` cards of `--card-kib` KiB (50 MiB by default), then `--concurrent`
 *   multigets of the whole book with `C:address-data` at once, each answer read to its end; the
 *   process's RSS (from /proc) is sampled every 20 ms, and its growth over the RSS before them printed;
 * - XML: the time of a REPORT whose root carries 20k, 40k, 80k and 160k empty attributes (refused
 *   at the 65th), and of one of 1 MiB spread over elements of 63 (parsed whole);
 * - latency: `/healthz` sent while a 1 MiB multiget body is parsed, its time to answer.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import {
  cleanUp,
  createDatabase,
  ensureBuilt,
  expectStatus,
  LIMITS_LIFTED,
  log,
  SERVER_ENTRY,
  startNode,
  verifiedUser,
} from './support.js';

const { values } = parseArgs({
  options: {
    cards: { type: 'string', default: '200' },
    'card-kib': { type: 'string', default: '250' },
    concurrent: { type: 'string', default: '8' },
  },
});
const CARDS = Number(values.cards);
const CARD_KIB = Number(values['card-kib']);
const CONCURRENT = Number(values.concurrent);

async function rssOf(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/^VmRSS:\s+(\d+) kB$/m.exec(status)![1]) * 1024;
}

const MiB = 1024 * 1024;

async function main(): Promise<void> {
  ensureBuilt([SERVER_ENTRY]);
  const work = await mkdtemp(path.join(os.tmpdir(), 'bench-carddav-bounds-'));
  const dataDir = path.join(work, 'service');
  await mkdir(dataDir);
  const databaseUrl = await createDatabase(`contacts_bench_davbounds_${Date.now().toString(36)}`, false);
  const service = await startNode(
    'service',
    SERVER_ENTRY,
    [],
    {
      NODE_ENV: 'production',
      JWT_SECRET: randomBytes(48).toString('base64url'),
      DATABASE_URL: databaseUrl,
      LOG_LEVEL: 'warn',
      DATA_DIR: dataDir,
      ...LIMITS_LIFTED,
    },
    { path: '/readyz', status: 200 },
  );
  const accountPassword = randomBytes(18).toString('base64url');
  const token = await verifiedUser(service.base, path.join(dataDir, 'outbox'), 'bench_bounds', accountPassword);
  const bearer = { authorization: `Bearer ${token}` };
  const created = await expectStatus(
    await fetch(`${service.base}/api/users/me/app-passwords`, {
      method: 'POST',
      headers: { ...bearer, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'bench', password: accountPassword }),
    }),
    201,
    'app password',
  );
  const { password } = (await created.json()) as { password: string };
  const me = (await (await fetch(`${service.base}/api/users/me`, { headers: bearer })).json()) as { id: number };
  const basic = `Basic ${Buffer.from(`bench_bounds:${password}`).toString('base64')}`;
  const book = `/dav/addressbooks/${me.id}/contacts/`;
  const dav = (method: string, url: string, body: string, headers: Record<string, string> = {}) =>
    fetch(`${service.base}${url}`, {
      method,
      headers: { authorization: basic, 'content-type': 'application/xml', ...headers },
      body,
    });

  log(`storing ${CARDS} cards of ${CARD_KIB} KiB`);
  const note = 'n'.repeat(CARD_KIB * 1024 - 200);
  for (let i = 0; i < CARDS; i++) {
    const text = `BEGIN:VCARD\r\nVERSION:3.0\r\nUID:bench-${i}\r\nFN:Bench ${i}\r\nNOTE:${note}\r\nEND:VCARD\r\n`;
    await expectStatus(await dav('PUT', `${book}c${i}.vcf`, text, { 'content-type': 'text/vcard' }), 201, `PUT card ${i}`);
  }
  const hrefs = Array.from({ length: CARDS }, (_, i) => `<D:href>${book}c${i}.vcf</D:href>`).join('');
  const multiget = `<C:addressbook-multiget xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:carddav"><D:prop><D:getetag/><C:address-data/></D:prop>${hrefs}</C:addressbook-multiget>`;
  /** Reads a multiget's answer to its end, keeping only its length. */
  const readMultiget = async () => {
    const response = await expectStatus(await dav('REPORT', book, multiget), 207, 'multiget');
    let octets = 0;
    for await (const chunk of response.body!) octets += (chunk as Uint8Array).length;
    return octets;
  };
  await readMultiget(); // warms the process up: code compiled, pools filled
  await new Promise((resolve) => setTimeout(resolve, 2_000));
  const before = await rssOf(service.pid);
  let peak = before;
  const sampler = setInterval(() => {
    void rssOf(service.pid).then((rss) => (peak = Math.max(peak, rss)));
  }, 20);
  const started = performance.now();
  const octets = await Promise.all(Array.from({ length: CONCURRENT }, readMultiget));
  const seconds = (performance.now() - started) / 1000;
  clearInterval(sampler);
  console.log(
    `memory: ${CONCURRENT} concurrent multigets of ${CARDS} cards of ${CARD_KIB} KiB (${((CARDS * CARD_KIB) / 1024).toFixed(1)} MiB book), ` +
      `${(octets[0]! / MiB).toFixed(1)} MiB each, in ${seconds.toFixed(1)} s: RSS ${(before / MiB).toFixed(0)} MiB before, ` +
      `peak ${(peak / MiB).toFixed(0)} MiB, growth ${((peak - before) / MiB).toFixed(1)} MiB`,
  );

  const attributes = (count: number) => Array.from({ length: count }, (_, i) => `a${i.toString(36)}=""`).join(' ');
  for (const count of [20_000, 40_000, 80_000, 160_000]) {
    const body = `<D:x xmlns:D="DAV:" ${attributes(count)}/>`;
    const at = performance.now();
    const response = await dav('REPORT', book, body);
    await response.text();
    console.log(
      `xml: one element with ${count} attributes (${(body.length / 1024).toFixed(0)} KiB): ${response.status} in ${(performance.now() - at).toFixed(1)} ms`,
    );
  }
  const spread = `<D:x xmlns:D="DAV:">${`<D:y ${attributes(63)}/>`.repeat(Math.floor(1_000_000 / (`<D:y ${attributes(63)}/>`.length + 1)))}</D:x>`;
  let at = performance.now();
  let response = await dav('REPORT', book, spread);
  await response.text();
  console.log(
    `xml: ${(spread.length / 1024).toFixed(0)} KiB of elements with 63 attributes each: ${response.status} in ${(performance.now() - at).toFixed(1)} ms`,
  );

  const long = Array.from({ length: 10_000 }, (_, i) => `<D:href>${book}${String(i).padStart(50, 'h')}.vcf</D:href>`).join('');
  const hostile = `<C:addressbook-multiget xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:carddav"><D:prop><D:getetag/></D:prop>${long}</C:addressbook-multiget>`;
  at = performance.now();
  const pending = dav('REPORT', book, hostile).then(async (answer) => {
    await answer.text();
    return { status: answer.status, ms: performance.now() - at };
  });
  await new Promise((resolve) => setTimeout(resolve, 5));
  const healthAt = performance.now();
  response = await fetch(`${service.base}/healthz`);
  const healthMs = performance.now() - healthAt;
  const done = await pending;
  console.log(
    `latency: /healthz answered ${response.status} in ${healthMs.toFixed(1)} ms while a ${(hostile.length / 1024).toFixed(0)} KiB multiget ` +
      `(${done.status}) took ${done.ms.toFixed(1)} ms`,
  );
}

try {
  await main();
} finally {
  await cleanUp();
}
