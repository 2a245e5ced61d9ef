/**
 * The cost of a request body's XML (docs/limits.md, "CardDAV"): a body's parse costs linear CPU
 * time in its attributes, whether they crowd one element (refused at the 65th) or spread over many
 * (parsed whole), and the instance answers `/healthz` while a 1 MiB hostile body is being read.
 * Latencies are printed by `npm run bench:carddav-bounds`, not asserted here.
 */
import t from 'tap';
import { buildContactsApp } from '../contacts/fixtures.js';
import { davAs, davUser } from './dav-client.js';

const app = await buildContactsApp(t);
const user = await davUser(app);
const call = davAs(app, user);
const book = `/dav/addressbooks/${user.id}/contacts/`;

/** `count` empty attributes with short distinct names. */
const attributes = (count: number) => Array.from({ length: count }, (_, i) => `a${i.toString(36)}=""`).join(' ');
/** A REPORT whose root carries `count` attributes: the attack of one crowded element. */
const crowded = (count: number) => `<D:x xmlns:D="DAV:" ${attributes(count)}/>`;
/** A REPORT of `count` attributes, 63 to an element: parsed whole, then refused for its root. */
const spread = (count: number) => `<D:x xmlns:D="DAV:">${`<D:y ${attributes(63)}/>`.repeat(count / 63)}</D:x>`;

/** The least CPU time (user and system, µs) of five REPORTs of `body`, with its answer: the least is the one a collection or a neighbour disturbed least. */
async function cpuOf(body: string): Promise<{ micros: number; status: number; detail: string }> {
  let micros = Infinity;
  let answer = { status: 0, detail: '' };
  for (let run = 0; run < 5; run++) {
    const before = process.cpuUsage();
    const res = await call('REPORT', book, body);
    const used = process.cpuUsage(before);
    micros = Math.min(micros, used.user + used.system);
    answer = { status: res.statusCode, detail: /<X:detail>(.*)<\/X:detail>/.exec(res.body)?.[1] ?? '' };
  }
  return { micros, status: answer.status, detail: answer.detail };
}

t.test('8× the attributes costs less than 16× the CPU time (quadratic: 64×), on one element and spread over many', async (t) => {
  await cpuOf(spread(63 * 40)); // warms up the parser and the route
  for (const [shape, make, one, status, detail] of [
    ['one element', crowded, 12_000, 413, 'An XML element holds more than 64 attributes'],
    ['many elements', spread, 63 * 250, 403, 'The report x is not supported here'],
  ] as const) {
    const small = await cpuOf(make(one));
    const large = await cpuOf(make(one * 8));
    t.equal(large.status, status, `${shape}: status`);
    t.equal(large.detail, detail, `${shape}: detail`);
    t.ok(
      large.micros < 16 * Math.max(small.micros, 1_000),
      `${shape}: ${one * 8} attributes took ${large.micros} µs, ${one} took ${small.micros} µs`,
    );
  }
  for (const body of [crowded(12_000 * 8), spread(63 * 250 * 8)]) t.ok(Buffer.byteLength(body) < 1024 * 1024, 'within the REPORT bound');
});

t.test('/healthz is answered while a 1 MiB hostile body is parsed', async (t) => {
  await app.listen({ host: '127.0.0.1', port: 0 });
  const address = app.server.address();
  const base = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`;
  // 1 MiB that passes every bound but size: a multiget of 10,000 long hrefs.
  const pad = Math.floor((1_040_000 - 10_000 * `<D:href>${book}.vcf</D:href>`.length) / 10_000);
  const hrefs = Array.from({ length: 10_000 }, (_, i) => `<D:href>${book}${String(i).padStart(pad, 'h')}.vcf</D:href>`).join('');
  const body = `<C:addressbook-multiget xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:carddav"><D:prop><D:getetag/></D:prop>${hrefs}</C:addressbook-multiget>`;
  t.ok(Buffer.byteLength(body) > 1_000_000 && Buffer.byteLength(body) <= 1024 * 1024, 'about 1 MiB');
  const hostile = fetch(`${base}${book}`, {
    method: 'REPORT',
    headers: { authorization: user.basic, 'content-type': 'application/xml' },
    body,
  });
  const health = await fetch(`${base}/healthz`);
  t.equal(health.status, 200);
  const answer = await hostile;
  t.equal(answer.status, 207);
  await answer.text();
});
