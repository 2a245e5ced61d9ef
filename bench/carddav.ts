/**
 * `npm run bench:carddav -- [--sizes 1000,10000] [--big 100000] [--rounds 3] [--cap 900] [--servers service,radicale]`
 *
 * The same vdirsyncer scenarios against the service (compiled, on its own PostgreSQL database) and
 * against Debian's Radicale (started here on a free port of 127.0.0.1, with its own storage folder,
 * htpasswd file and every setting on its command line, so /etc/radicale/config changes nothing), in
 * one run. For each size N: a book of N cards on the server and a folder of N other cards, then
 * - the initial two-way sync (2N cards move: N each way);
 * - a sync after 10 edits (5 in the folder, 5 on the server by PUT), in rounds;
 * - a sync with nothing to do, in rounds.
 * Then, on a book of `--big` cards: PROPFIND Depth 1 (vdirsyncer's listing request), and a
 * sync-collection REPORT after 10 changes, in rounds. Rounds alternate between the two servers.
 * Cards per second: the cards the sync covers (2N) over its seconds; for PROPFIND and the
 * sync-collection, the book's size and the 10 changes. The ratio is Radicale's time over the
 * service's (above 1: the service is faster). A vdirsyncer run that outlasts `--cap` seconds is
 * stopped and reported as "> cap" (a lower bound). When that is an initial sync, the server reaches
 * the state the sync would have left by a download instead (both sides' cards written into its book,
 * then a sync into an empty folder), and its later rounds of the size run from there, as a note under
 * the table says. Each result is logged as it is measured; the Markdown table goes to stdout at the end.
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { run, vdirsyncer, vdirsyncerSetup, type VdirsyncerSetup } from '../test/carddav/carddav-clients.js';
import {
  cleanUp,
  createDatabase,
  ensureBuilt,
  expectStatus,
  freePort,
  log,
  SERVER_ENTRY,
  startNode,
  stopChild,
  undo,
  verifiedUser,
  LIMITS_LIFTED,
} from './support.js';

const { values } = parseArgs({
  options: {
    sizes: { type: 'string', default: '1000,10000' },
    servers: { type: 'string', default: 'service,radicale' },
    big: { type: 'string', default: '100000' },
    rounds: { type: 'string', default: '3' },
    cap: { type: 'string', default: '900' },
  },
});
const SIZES = values.sizes
  .split(',')
  .filter((size) => size.trim() !== '')
  .map(Number);
const BIG = Number(values.big);
/** Which servers run: a server left out shows "not run" (a capped request can keep Radicale busy long after). */
const SERVERS = values.servers.split(',').map((name) => name.trim());
const ROUNDS = Number(values.rounds);
const CAP_S = Number(values.cap);
const IMPORT_BATCH = 10_000;
const PROPFIND_BODY =
  '<?xml version="1.0" encoding="utf-8" ?><propfind xmlns="DAV:"><prop><resourcetype/><getcontenttype/><getetag/></prop></propfind>';

/** A CardDAV server under test: where its root is, how to sign in, and how to fill a book. */
interface Server {
  name: 'service' | 'radicale';
  root: string;
  username: string;
  password: string;
  /** The book's URL (an absolute path). */
  book: string;
  /** Gives the book `count` more cards (`side` in their names), written the server's own fast way. */
  seed(count: number, prefix: string, side?: string): Promise<void>;
  /** Empties the book. */
  reset(): Promise<void>;
}

function cardText(uid: string, n: number, side: string): string {
  return [
    'BEGIN:VCARD',
    'VERSION:3.0',
    `UID:${uid}`,
    `FN:${side} Person${n}`,
    `N:Person${n};${side};;;`,
    `EMAIL;TYPE=home:${side.toLowerCase()}${n}@example.org`,
    `TEL;TYPE=cell:+4420794${String(n % 100000).padStart(5, '0')}`,
    'END:VCARD',
    '',
  ].join('\r\n');
}

const auth = (server: Server) => `Basic ${Buffer.from(`${server.username}:${server.password}`).toString('base64')}`;

async function dav(server: Server, method: string, url: string, body?: string, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${server.root}${url}`, {
    method,
    headers: {
      authorization: auth(server),
      ...(body?.startsWith('<') ? { 'content-type': 'application/xml; charset=utf-8' } : {}),
      ...headers,
    },
    ...(body === undefined ? {} : { body }),
  });
}

// ---------------------------------------------------------------------------------------------
// The two servers.

async function startService(work: string): Promise<Server> {
  ensureBuilt([SERVER_ENTRY]);
  const databaseUrl = await createDatabase(`contacts_bench_carddav_${Date.now().toString(36)}`, false);
  const dataDir = path.join(work, 'service');
  await mkdir(dataDir);
  const service = await startNode(
    'service',
    SERVER_ENTRY,
    [],
    // The access token seeds the books over REST for the whole run: it must outlive 15 minutes.
    {
      NODE_ENV: 'production',
      JWT_SECRET: randomBytes(48).toString('base64url'),
      DATABASE_URL: databaseUrl,
      LOG_LEVEL: 'warn',
      DATA_DIR: dataDir,
      ...LIMITS_LIFTED,
      ACCESS_TOKEN_TTL: '86400',
    },
    { path: '/readyz', status: 200 },
  );
  // App passwords are made with the account password.
  const accountPassword = randomBytes(18).toString('base64url');
  const token = await verifiedUser(service.base, path.join(dataDir, 'outbox'), 'bench_dav', accountPassword);
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
  return {
    name: 'service',
    root: service.base,
    username: 'bench_dav',
    password,
    book: `/dav/addressbooks/${me.id}/contacts/`,
    async seed(count, prefix, side = 'Server') {
      for (let start = 0; start < count; start += IMPORT_BATCH) {
        const rows = ['first_name,last_name,email,phone,birthday'];
        for (let n = start; n < Math.min(count, start + IMPORT_BATCH); n++)
          rows.push(`${side},Person${n},${prefix}${n}@example.com,+1415${String(n).padStart(7, '0')},1980-01-01`);
        const res = await fetch(`${service.base}/api/contacts/import`, {
          method: 'POST',
          headers: { ...bearer, 'content-type': 'text/csv' },
          body: `${rows.join('\n')}\n`,
        });
        await expectStatus(res, 200, 'import');
      }
    },
    async reset() {
      const pool = await import('pg');
      const client = new pool.default.Client({ connectionString: databaseUrl });
      await client.connect();
      await client.query('delete from contacts where owner_id = $1', [me.id]);
      await client.end();
    },
  };
}

async function startRadicale(work: string): Promise<Server> {
  const storage = path.join(work, 'radicale');
  const username = 'bench';
  const password = randomBytes(12).toString('hex');
  const users = path.join(work, 'radicale-users');
  await writeFile(users, `${username}:${password}\n`);
  const bookDir = path.join(storage, 'collection-root', username, 'contacts');
  await mkdir(bookDir, { recursive: true });
  await writeFile(path.join(bookDir, '.Radicale.props'), JSON.stringify({ tag: 'VADDRESSBOOK', 'D:displayname': 'Contacts' }));
  const port = await freePort();
  // Every setting that matters is given here: the Debian config's remote_user auth and its
  // storage folder would otherwise apply.
  const child = spawn(
    'radicale',
    [
      '--config',
      path.join(work, 'radicale-none.conf'),
      '--server-hosts',
      `127.0.0.1:${port}`,
      '--server-ssl',
      'False',
      '--auth-type',
      'htpasswd',
      '--auth-htpasswd-filename',
      users,
      '--auth-htpasswd-encryption',
      'plain',
      '--rights-type',
      'owner_only',
      '--storage-filesystem-folder',
      storage,
      '--logging-level',
      'warning',
    ],
    { stdio: ['ignore', 'inherit', 'inherit'] },
  );
  const exited = new Promise((resolve) => child.once('exit', resolve));
  undo.push({ what: 'stop Radicale', run: () => stopChild(child, exited) });
  const root = `http://127.0.0.1:${port}`;
  for (const deadline = Date.now() + 30_000; ; await sleep(200)) {
    if (Date.now() > deadline || child.exitCode !== null) throw new Error('Radicale did not start');
    if (
      await fetch(`${root}/.web/`).then(
        () => true,
        () => false,
      )
    )
      break;
  }
  return {
    name: 'radicale',
    root,
    username,
    password,
    book: `/${username}/contacts/`,
    async seed(count, prefix, side = 'Server') {
      // Radicale's storage is a folder of .vcf files: written straight, as the service's are imported.
      for (let n = 0; n < count; n++) await writeFile(path.join(bookDir, `${prefix}${n}.vcf`), cardText(`${prefix}${n}`, n, side));
    },
    async reset() {
      // After a sync stopped at the cap, Radicale still finishes the request it was in, writing
      // into its cache folder while it is removed: try again until nothing is left.
      for (let attempt = 1; ; attempt++) {
        try {
          for (const file of await readdir(bookDir))
            if (file !== '.Radicale.props') await rm(path.join(bookDir, file), { recursive: true, force: true });
          return;
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code !== 'ENOTEMPTY' || attempt === 30) throw error;
          await sleep(1000);
        }
      }
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Scenarios.

async function timed<T>(work: () => Promise<T>): Promise<{ seconds: number; value: T }> {
  const start = performance.now();
  const value = await work();
  return { seconds: (performance.now() - start) / 1000, value };
}

/** Seconds of one `vdirsyncer sync`; Infinity when it outlasted the cap (and was stopped). */
async function syncOnce(setup: VdirsyncerSetup, what: string): Promise<number> {
  const { seconds, value } = await timed(() => vdirsyncer(setup, ['sync'], 'info', CAP_S * 1000));
  if (seconds >= CAP_S) return Infinity;
  if (value.code !== 0) throw new Error(`${what}: vdirsyncer failed: ${value.stderr.slice(-2000)}`);
  return seconds;
}

/** 5 edits in the folder and 5 on the server (GET, then PUT with If-Match). */
async function tenEdits(server: Server, setup: VdirsyncerSetup, round: number): Promise<void> {
  const files = (await readdir(setup.localDir)).filter((file) => file.startsWith('local-')).slice(round * 5, round * 5 + 5);
  for (const file of files) {
    const full = path.join(setup.localDir, file);
    await writeFile(full, (await readFile(full, 'utf8')).replace(/FN:[^\r\n]*/, `FN:Edited Locally ${round}`));
  }
  const listing = await (await dav(server, 'PROPFIND', server.book, PROPFIND_BODY, { depth: '1' })).text();
  const hrefs = [...listing.matchAll(/<(?:\w+:)?href>([^<]+\.vcf)<\/(?:\w+:)?href>/g)]
    .map((match) => match[1]!)
    .filter((href) => !/local-/.test(href));
  for (const href of hrefs.slice(round * 5, round * 5 + 5)) {
    const url = href.startsWith('http') ? new URL(href).pathname : href;
    const got = await dav(server, 'GET', url);
    const text = (await got.text()).replace(/FN:[^\r\n]*/, `FN:Edited On Server ${round}`);
    const put = await dav(server, 'PUT', url, text, { 'content-type': 'text/vcard', 'if-match': got.headers.get('etag')! });
    // A replace is 204 here, 201 in Radicale.
    if (put.status !== 204 && put.status !== 201) throw new Error(`${server.name}: server edit answered ${put.status}`);
  }
}

interface Row {
  scenario: string;
  cards: number;
  seconds: Record<Server['name'], number>;
  /** Said under the table. */
  note?: string;
}

/** The middle value; of an even number, the mean of the middle two. */
function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

async function syncScenarios(servers: Server[], size: number, work: string): Promise<Row[]> {
  const setups = new Map<Server['name'], VdirsyncerSetup>();
  const initial: Partial<Record<Server['name'], number>> = {};
  for (const server of servers) {
    log(`${server.name}: a book of ${size} cards and a folder of ${size}`);
    await server.reset();
    await server.seed(size, `server-${size}-`);
    const dir = path.join(work, `${server.name}-${size}`);
    const setup = await vdirsyncerSetup(dir, { url: `${server.root}/`, username: server.username, password: server.password }, 'b wins');
    const discovered = await vdirsyncer(setup, ['discover']);
    if (discovered.code !== 0) throw new Error(`${server.name}: discover failed: ${discovered.stderr}`);
    for (let n = 0; n < size; n++) await writeFile(path.join(setup.localDir, `local-${n}.vcf`), cardText(`local-${size}-${n}`, n, 'Local'));
    setups.set(server.name, setup);
    log(`${server.name}: initial sync of ${2 * size} cards`);
    initial[server.name] = await syncOnce(setup, 'initial sync');
    log(`${server.name}: initial sync, ${size} a side: ${initial[server.name]!.toFixed(2)} s`);
  }
  // A server whose initial sync hit the cap reaches the state it would have left another way: both
  // sets of cards written into its book its own fast way, then a sync that only downloads them.
  const downloaded: Server['name'][] = [];
  for (const server of servers.filter((server) => !Number.isFinite(initial[server.name]))) {
    log(`${server.name}: the synced state of ${size} a side by a download of ${2 * size} cards`);
    await server.reset();
    await server.seed(size, `server-${size}-`);
    await server.seed(size, `local-${size}-`, 'Local');
    const setup = await vdirsyncerSetup(
      path.join(work, `${server.name}-${size}-download`),
      { url: `${server.root}/`, username: server.username, password: server.password },
      'b wins',
    );
    const discovered = await vdirsyncer(setup, ['discover']);
    if (discovered.code !== 0) throw new Error(`${server.name}: discover failed: ${discovered.stderr}`);
    const seconds = await syncOnce(setup, 'download');
    log(`${server.name}: download of ${2 * size} cards: ${seconds.toFixed(2)} s`);
    if (!Number.isFinite(seconds)) continue;
    setups.set(server.name, setup);
    downloaded.push(server.name);
  }
  const edits: Record<string, number[]> = {};
  const idle: Record<string, number[]> = {};
  const synced = servers.filter((server) => Number.isFinite(initial[server.name]) || downloaded.includes(server.name));
  for (let round = 0; round < ROUNDS; round++) {
    for (const server of synced) {
      const setup = setups.get(server.name)!;
      await tenEdits(server, setup, round);
      (edits[server.name] ??= []).push(await syncOnce(setup, 'sync after 10 edits'));
      log(`${server.name}: sync after 10 edits, ${size} a side, round ${round}: ${edits[server.name]!.at(-1)!.toFixed(2)} s`);
    }
    for (const server of synced) {
      (idle[server.name] ??= []).push(await syncOnce(setups.get(server.name)!, 'sync with nothing to do'));
      log(`${server.name}: sync with nothing to do, ${size} a side, round ${round}: ${idle[server.name]!.at(-1)!.toFixed(2)} s`);
    }
  }
  const of = (samples: Record<string, number[]>) =>
    Object.fromEntries(
      servers.map((server) => [server.name, samples[server.name] ? median(samples[server.name]!) : NaN]),
    ) as Row['seconds'];
  const note =
    downloaded.length === 0
      ? undefined
      : `${size} a side: ${downloaded.join(', ')} started the later rows from its book and folder filled by a download, its initial sync having outlasted ${CAP_S} s`;
  return [
    { scenario: `initial sync, ${size} cards a side`, cards: 2 * size, seconds: { service: NaN, radicale: NaN, ...initial } },
    { scenario: `sync after 10 edits, ${size} a side`, cards: 2 * size, seconds: of(edits), note },
    { scenario: `sync with nothing to do, ${size} a side`, cards: 2 * size, seconds: of(idle), note },
  ];
}

/**
 * `method` on `url` of `server`, its answer read whole; null when none came within the cap. Over
 * node:http, whose wait has no limit of its own (fetch gives up on headers after 300 s).
 */
function cappedDav(
  server: Server,
  method: string,
  url: string,
  body: string,
  headers: Record<string, string>,
): Promise<{ status: number; text: string } | null> {
  return new Promise((resolve, reject) => {
    const request = http.request(`${server.root}${url}`, {
      method,
      headers: { authorization: auth(server), 'content-type': 'application/xml; charset=utf-8', ...headers },
      signal: AbortSignal.timeout(CAP_S * 1000),
    });
    request.on('response', (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () => resolve({ status: response.statusCode!, text: Buffer.concat(chunks).toString('utf8') }));
      response.on('error', (error) => (error.name === 'AbortError' ? resolve(null) : reject(error)));
    });
    request.on('error', (error) => (error.name === 'AbortError' ? resolve(null) : reject(error)));
    request.end(body);
  });
}

/** PROPFIND Depth 1 of the book, in seconds; Infinity when it outlasted the cap. */
async function listingSeconds(server: Server): Promise<number> {
  const { seconds, value } = await timed(() => cappedDav(server, 'PROPFIND', server.book, PROPFIND_BODY, { depth: '1' }));
  if (value === null) return Infinity;
  if (value.status !== 207 || (value.text.match(/\.vcf</g) ?? []).length < BIG)
    throw new Error(`${server.name}: PROPFIND listed too little`);
  return seconds;
}

async function bigBookScenarios(servers: Server[]): Promise<Row[]> {
  const propfind: Record<string, number[]> = {};
  const changes: Record<string, number[]> = {};
  const listing: Server[] = [];
  for (const server of servers) {
    log(`${server.name}: a book of ${BIG} cards`);
    await server.reset();
    await server.seed(BIG, 'big-');
    // A first listing warms what each server keeps in memory or on disk (Radicale's item cache). A
    // server that cannot list the book within the cap is reported as slower than the cap.
    const warmUp = await listingSeconds(server);
    log(`${server.name}: warm-up PROPFIND Depth 1 of ${BIG} cards: ${warmUp.toFixed(2)} s`);
    if (Number.isFinite(warmUp)) listing.push(server);
    else propfind[server.name] = [Infinity];
  }
  for (let round = 0; round < ROUNDS; round++) {
    for (const server of listing) {
      (propfind[server.name] ??= []).push(await listingSeconds(server));
      log(`${server.name}: PROPFIND Depth 1 of ${BIG} cards, round ${round}: ${propfind[server.name]!.at(-1)!.toFixed(2)} s`);
    }
    for (const server of listing) {
      const tokenAnswer = await (
        await dav(server, 'PROPFIND', server.book, '<?xml version="1.0"?><propfind xmlns="DAV:"><prop><sync-token/></prop></propfind>', {
          depth: '0',
        })
      ).text();
      const token = /<(?:\w+:)?sync-token>([^<]+)</.exec(tokenAnswer)![1]!;
      for (let n = 0; n < 10; n++) {
        await expectStatus(
          await dav(server, 'PUT', `${server.book}change-${round}-${n}.vcf`, cardText(`change-${round}-${n}`, n, 'Changed'), {
            'content-type': 'text/vcard',
          }),
          201,
          'change',
        );
      }
      const report = `<?xml version="1.0" encoding="utf-8"?><sync-collection xmlns="DAV:"><sync-token>${token}</sync-token><sync-level>1</sync-level><prop><getetag/></prop></sync-collection>`;
      const { seconds, value } = await timed(async () => {
        const res = await dav(server, 'REPORT', server.book, report, { depth: '0' });
        return { status: res.status, text: await res.text() };
      });
      if (value.status !== 207 || (value.text.match(/change-/g) ?? []).length < 10)
        throw new Error(`${server.name}: sync-collection missed changes: ${value.text.slice(0, 500)}`);
      (changes[server.name] ??= []).push(seconds);
      log(`${server.name}: sync-collection of 10 changes in ${BIG} cards, round ${round}: ${seconds.toFixed(3)} s`);
    }
  }
  const of = (samples: Record<string, number[]>) =>
    Object.fromEntries(
      servers.map((server) => [server.name, samples[server.name] ? median(samples[server.name]!) : NaN]),
    ) as Row['seconds'];
  const unlisted = servers.filter((server) => !listing.includes(server)).map((server) => server.name);
  const note =
    unlisted.length === 0
      ? undefined
      : `${BIG}-card book: ${unlisted.join(', ')} answered no PROPFIND Depth 1 within ${CAP_S} s, so its rounds there were not run`;
  return [
    { scenario: `PROPFIND Depth 1, ${BIG}-card book`, cards: BIG, seconds: of(propfind), note },
    { scenario: `sync-collection of 10 changes, ${BIG}-card book`, cards: 10, seconds: of(changes), note },
  ];
}

function table(rows: Row[]): string {
  const lines = [
    '| scenario | service s | service cards/s | Radicale s | Radicale cards/s | ratio (Radicale s / service s) |',
    '|---|---:|---:|---:|---:|---:|',
  ];
  const time = (s: number) => (Number.isNaN(s) ? 'not run' : Number.isFinite(s) ? s.toFixed(2) : `> ${CAP_S}`);
  const rate = (cards: number, s: number) =>
    Number.isNaN(s) ? '–' : Number.isFinite(s) ? Math.round(cards / s).toLocaleString('en-US') : `< ${Math.round(cards / CAP_S)}`;
  for (const { scenario, cards, seconds } of rows) {
    // A server left out (--servers) has no figure: "not run".
    const { service = NaN, radicale = NaN } = seconds as Partial<Row['seconds']>;
    const ratio = Number.isNaN(radicale)
      ? '–'
      : Number.isFinite(radicale)
        ? `${(radicale / service).toFixed(1)}×`
        : `> ${(CAP_S / service).toFixed(1)}×`;
    lines.push(`| ${scenario} | ${time(service)} | ${rate(cards, service)} | ${time(radicale)} | ${rate(cards, radicale)} | ${ratio} |`);
  }
  const notes = [...new Set(rows.flatMap((row) => (row.note ? [`- ${row.note}`] : [])))];
  return [...lines, ...(notes.length > 0 ? ['', ...notes] : [])].join('\n');
}

const rows: Row[] = [];
try {
  for (const tool of ['vdirsyncer', 'radicale']) {
    if ((await run('which', [tool])).code !== 0) throw new Error(`${tool} is not installed: apt-get install -y vdirsyncer radicale`);
  }
  log(`Radicale ${(await run('radicale', ['--version'])).stdout.trim()}, ${(await run('vdirsyncer', ['--version'])).stdout.trim()}`);
  const work = await mkdtemp(path.join(os.tmpdir(), 'contacts-bench-carddav-'));
  undo.push({ what: `remove ${work}`, run: () => rm(work, { recursive: true, force: true }) });
  await writeFile(path.join(work, 'radicale-none.conf'), '');
  const servers = [
    ...(SERVERS.includes('service') ? [await startService(work)] : []),
    ...(SERVERS.includes('radicale') ? [await startRadicale(work)] : []),
  ];
  for (const size of SIZES) rows.push(...(await syncScenarios(servers, size, work)));
  if (BIG > 0) rows.push(...(await bigBookScenarios(servers)));
} catch (error) {
  console.error(error);
  process.exitCode = 1;
} finally {
  // What was measured before a failure still counts.
  if (rows.length > 0) console.log(table(rows));
  await cleanUp();
}
