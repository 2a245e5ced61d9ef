/**
 * Real clients against a running service: Debian's vdirsyncer syncs a folder of cards with the
 * book two ways (1,000 cards a side), through edits on both sides, a deletion on each side and a
 * conflict resolved by policy, until a sync transfers nothing; khard lists every card of the
 * folder. `.ci/run` installs both; a missing client fails this test, it never skips.
 */
import { mkdtemp, rm, unlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import t, { type Test } from 'tap';
import { buildContactsApp } from '../contacts/fixtures.js';
import { localCards, requestCounts, run, vdirsyncer, vdirsyncerSetup } from './carddav-clients.js';
import { card, davAs, davUser } from './dav-client.js';

const SIDE = 1000;
// Two thousand cards through a real client: more than the suite's usual 120 s on a loaded machine.
t.setTimeout(600_000);

for (const tool of ['vdirsyncer', 'khard']) {
  const found = await run('which', [tool]);
  if (found.code !== 0) throw new Error(`${tool} is not installed: .ci/run installs it (apt-get install -y vdirsyncer khard)`);
}

const app = await buildContactsApp(t);
const user = await davUser(app);
await app.listen({ host: '127.0.0.1', port: 0 });
const { port } = app.server.address() as { port: number };
const dir = await mkdtemp(path.join(tmpdir(), 'contacts-vdirsyncer-'));
t.teardown(() => rm(dir, { recursive: true, force: true }));
const setup = await vdirsyncerSetup(
  dir,
  { url: `http://127.0.0.1:${port}/`, username: user.username, password: user.appPassword },
  'b wins',
);
const rest = (method: string, url: string, payload?: unknown, headers: Record<string, string> = {}) =>
  app.inject({
    method: method as 'GET',
    url,
    headers: { authorization: `Bearer ${user.token}`, ...headers },
    ...(payload === undefined ? {} : { payload: payload as string }),
  });
const dav = davAs(app, user);
const book = `/dav/addressbooks/${user.id}/contacts/`;

async function serverCount(): Promise<number> {
  return Number((await rest('GET', '/api/contacts/?limit=1')).headers['x-total-count']);
}

async function sync(t: Test, label: string): Promise<Record<string, number>> {
  const result = await vdirsyncer(setup, ['sync'], 'debug');
  t.equal(result.code, 0, `${label}: vdirsyncer sync exits 0${result.code === 0 ? '' : `\n${result.stderr.slice(-3000)}`}`);
  return requestCounts(result.stderr);
}

t.test('discovery from the server root finds the one book', async (t) => {
  const csv = ['first_name,last_name,email,phone,birthday'];
  for (let i = 0; i < SIDE; i++)
    csv.push(
      `Server,Person${i},server${i}@example.com,+1415555${String(i).padStart(4, '0')},1980-01-${String((i % 28) + 1).padStart(2, '0')}`,
    );
  const imported = await rest('POST', '/api/contacts/import', `${csv.join('\n')}\n`, { 'content-type': 'text/csv' });
  t.strictSame(imported.json(), { created: SIDE, errors: [] });
  const discovered = await vdirsyncer(setup, ['discover']);
  t.equal(discovered.code, 0, discovered.stderr);
  t.match(discovered.stdout + discovered.stderr, /contacts/);
});

t.test(`a first two-way sync of ${SIDE} cards a side leaves ${2 * SIDE} on both`, async (t) => {
  for (let i = 0; i < SIDE; i++) {
    const lines = [
      `N:Person${i};Local;;;`,
      `EMAIL;TYPE=home:local${i}@example.org`,
      `TEL;TYPE=cell:+44 20 7946 ${String(i).padStart(4, '0')}`,
      'ORG:Local Org',
      `NOTE:local card ${i}`,
    ];
    await writeFile(path.join(setup.localDir, `local-${i}.vcf`), card(`local-${i}`, `Local Person${i}`, lines));
  }
  const counts = await sync(t, 'first sync');
  t.equal(counts.PUT, SIDE, 'every local card uploaded');
  t.equal(await serverCount(), 2 * SIDE);
  t.equal((await localCards(setup)).size, 2 * SIDE);
  const uploaded = await dav('GET', `${book}local-7.vcf`);
  t.equal(uploaded.statusCode, 200);
  t.match(uploaded.body, 'NOTE:local card 7', 'the server keeps every property');
  const asContact = await rest('GET', '/api/contacts/?query=email:eq:local7@example.org');
  t.match(asContact.json(), [{ first_name: 'Local', last_name: 'Person7', phone: '+442079460007', birthday: null }]);
});

t.test('edits on both sides, a deletion on each side and a conflict resolved by policy (the server wins)', async (t) => {
  const files = await localCards(setup);
  const serverFiles = [...files.entries()].filter(([, text]) => text.includes('@example.com'));
  // Local edits and a local deletion.
  for (let i = 0; i < 5; i++) {
    await writeFile(
      path.join(setup.localDir, `local-${i}.vcf`),
      files.get(`local-${i}.vcf`)!.replace(`NOTE:local card ${i}`, `NOTE:edited locally ${i}`),
    );
  }
  await unlink(path.join(setup.localDir, 'local-999.vcf'));
  // Server edits and a server deletion.
  const serverContacts = (await rest('GET', '/api/contacts/?query=last_name:startswith:Person&limit=1000&sort=id')).json<
    { id: number; email: string }[]
  >();
  for (const contact of serverContacts.slice(0, 5))
    t.equal((await rest('PATCH', `/api/contacts/${contact.id}`, { first_name: 'EditedOnServer' })).statusCode, 200);
  const deletedOnServer = serverContacts[10]!;
  t.equal((await rest('DELETE', `/api/contacts/${deletedOnServer.id}`)).statusCode, 200);
  // A conflict: the same card edited on both sides.
  const conflicted = serverContacts[20]!;
  const [conflictFile, conflictText] = serverFiles.find(([, text]) => text.includes(`EMAIL:${conflicted.email}`))!;
  await writeFile(path.join(setup.localDir, conflictFile), conflictText.replace(/FN:[^\r\n]*/, 'FN:Local Side Wins'));
  t.equal((await rest('PATCH', `/api/contacts/${conflicted.id}`, { last_name: 'ServerSideWins' })).statusCode, 200);

  const counts = await sync(t, 'sync after edits');
  t.equal(counts.PUT, 5, 'the five local edits uploaded (the conflict is not)');
  t.equal(counts.DELETE, 1, 'the local deletion');
  const after = await localCards(setup);
  t.equal(after.size, 2 * SIDE - 2);
  t.equal(await serverCount(), 2 * SIDE - 2);
  t.equal((await dav('GET', `${book}local-999.vcf`)).statusCode, 404);
  t.notOk(
    [...after.values()].some((text) => text.includes(`EMAIL:${deletedOnServer.email}`)),
    'the server deletion reached the folder',
  );
  t.match((await dav('GET', `${book}local-3.vcf`)).body, 'NOTE:edited locally 3');
  t.equal([...after.values()].filter((text) => text.includes('FN:EditedOnServer')).length, 5, 'the server edits reached the folder');
  const resolved = after.get(conflictFile)!;
  t.match(resolved, 'N:ServerSideWins;Server;;;', 'the conflict went to the server, as the pair says');
  t.notMatch(resolved, 'Local Side Wins');
});

t.test('a final sync transfers nothing, and khard lists every card', async (t) => {
  const counts = await sync(t, 'final sync');
  t.strictSame(
    { PUT: counts.PUT ?? 0, DELETE: counts.DELETE ?? 0, REPORT: counts.REPORT ?? 0, GET: counts.GET ?? 0 },
    { PUT: 0, DELETE: 0, REPORT: 0, GET: 0 },
  );
  const listed = await run('khard', ['-c', setup.khardConfigPath, 'list', '--parsable'], { env: { LC_ALL: 'C.UTF-8', LANG: 'C.UTF-8' } });
  t.equal(listed.code, 0, listed.stderr);
  const rows = listed.stdout.split('\n').filter((line) => line.trim() !== '');
  t.equal(rows.length, 2 * SIDE - 2, 'khard counts every card');
});
