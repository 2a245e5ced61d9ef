/**
 * The SDK (sdk/src) as a real client: the whole user journey over real HTTP through it alone, and
 * `tsc` refusing code that misuses it.
 */
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';
import t, { type Test } from 'tap';
import { createContactsClient, login, refreshTokens, tokenSession } from '../../sdk/src/index.js';
import { build, smtpCapture } from '../helper.js';

const run = promisify(execFile);

t.test('a user journey driven only through the generated client', async (t) => {
  const mailbox = await smtpCapture(t);
  const app = await build(t, { env: { SMTP_URL: mailbox.url } });
  const baseUrl = await app.listen({ host: '127.0.0.1', port: 0 });
  const session = tokenSession();
  // An async getter, as one reading a token store would be.
  const client = createContactsClient(baseUrl, async () => session.getToken());

  const registered = await client.POST('/api/auth/register', {
    body: { username: 'sdk_user', email: 'sdk@example.com', password: 'correct-horse-battery' },
  });
  t.equal(registered.response.status, 201);
  t.equal(registered.data?.is_verified, false);

  const link = new URL((await mailbox.next()).link ?? '');
  const verified = await client.GET('/api/auth/verify-email', { params: { query: { token: link.searchParams.get('token') ?? '' } } });
  t.same(verified.data, { message: 'Email verified' });

  const wrongPassword = await login(client, { username: 'sdk_user', password: 'wrong-horse-battery' });
  t.equal(wrongPassword.response.status, 401);
  t.same(wrongPassword.error, { detail: 'Incorrect username or password' });
  const loggedIn = await login(client, { username: 'SDK@example.com', password: 'correct-horse-battery' });
  t.equal(loggedIn.response.status, 200);
  const tokens = loggedIn.data!;
  t.equal(tokens.token_type, 'bearer');
  session.set(tokens);

  const today = new Date();
  const birthdayInDays = (days: number) => {
    const d = new Date(Date.UTC(1990, today.getUTCMonth(), today.getUTCDate() + days));
    return d.toISOString().slice(0, 10);
  };
  for (let i = 0; i < 50; i++) {
    const created = await client.POST('/api/contacts/', {
      body: {
        first_name: i % 2 === 0 ? 'Even' : 'Odd',
        last_name: `Number${String(i).padStart(2, '0')}`,
        email: `contact${i}@example.com`,
        phone: `+1 415 555 ${String(1000 + i)}`,
        // Contact i has its birthday i days from now (in 1990), so the first few are upcoming.
        birthday: birthdayInDays(i),
      },
    });
    t.equal(created.response.status, 201, `contact ${i} created`);
  }

  const filtered = await client.GET('/api/contacts/', { params: { query: { query: 'first_name:eq:Even', limit: 10 } } });
  t.equal(filtered.response.headers.get('x-total-count'), '25');
  t.ok(filtered.data?.every((c) => c.first_name === 'Even'));

  // Follow the Link header's rel="next" until it runs out.
  const seen: number[] = [];
  let next: URL | null = new URL('/api/contacts/?limit=15', baseUrl);
  let pages = 0;
  while (next) {
    const page = await client.GET('/api/contacts/', {
      params: { query: { skip: Number(next.searchParams.get('skip') ?? 0), limit: Number(next.searchParams.get('limit')) } },
    });
    pages++;
    seen.push(...(page.data ?? []).map((c) => c.id));
    const rel = /<([^>]+)>;\s*rel="next"/.exec(page.response.headers.get('link') ?? '');
    next = rel?.[1] ? new URL(rel[1], baseUrl) : null;
  }
  t.equal(pages, 4, '50 contacts in pages of 15');
  t.equal(new Set(seen).size, 50, 'every contact seen once');

  const upcoming = await client.GET('/api/contacts/get-upcoming-birthday', { params: { query: { time_range: 6 } } });
  t.equal(upcoming.data?.length, 7, 'birthdays today through six days ahead');

  const id = seen[0]!;
  const patched = await client.PATCH('/api/contacts/{contact_id}', {
    params: { path: { contact_id: id } },
    body: { last_name: 'Patched' },
  });
  t.equal(patched.data?.last_name, 'Patched');
  const replaced = await client.PUT('/api/contacts/{contact_id}', {
    params: { path: { contact_id: id } },
    body: { first_name: 'Put', last_name: 'Whole', email: 'put@example.com', phone: '+14155550000', birthday: '1980-01-01' },
  });
  t.equal(replaced.data?.email, 'put@example.com');
  const deleted = await client.DELETE('/api/contacts/{contact_id}', { params: { path: { contact_id: id } } });
  t.equal(deleted.data?.id, id);
  const gone = await client.GET('/api/contacts/{contact_id}', { params: { path: { contact_id: id } } });
  t.equal(gone.response.status, 404);
  t.same(gone.error, { detail: 'Contact not found' });

  const refreshed = await refreshTokens(client, tokens.refresh_token);
  t.equal(refreshed.data?.refresh_token, tokens.refresh_token);
  t.not(refreshed.data?.access_token, tokens.access_token);
  session.set(refreshed.data ?? null);
  const me = await client.GET('/api/users/me');
  t.equal(me.data?.username, 'sdk_user');

  const logout = await client.POST('/api/auth/logout');
  t.equal(logout.response.status, 204);
  const afterLogout = await refreshTokens(client, tokens.refresh_token);
  t.equal(afterLogout.response.status, 401);
  t.same(afterLogout.error, { detail: 'Invalid refresh token' });
});

/** Type-checks one file importing `sdk/src/index.js` (as 'contacts-sdk') with the project's settings; `code` 0 when it compiles. */
async function typechecker(t: Test): Promise<(source: string) => Promise<{ code: number; output: string }>> {
  // Inside the project, so the usage file resolves openapi-fetch from its node_modules.
  await mkdir('.data', { recursive: true });
  const dir = await mkdtemp(path.resolve('.data', 'sdk-typecheck-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const sdk = path.relative(dir, path.resolve('sdk/src/index.js')).split(path.sep).join('/');
  // Snippets (the README's among them) may import more than they use; that is no misuse of the client.
  await writeFile(
    path.join(dir, 'tsconfig.json'),
    JSON.stringify({
      extends: path.relative(dir, path.resolve('tsconfig.json')),
      compilerOptions: { noUnusedLocals: false, noUnusedParameters: false },
      include: ['usage.ts'],
    }),
  );
  return async (source) => {
    await writeFile(path.join(dir, 'usage.ts'), source.replaceAll("'contacts-sdk'", `'${sdk}'`));
    return run(process.execPath, [path.resolve('node_modules/typescript/bin/tsc'), '-p', dir], { cwd: dir }).then(
      () => ({ code: 0, output: '' }),
      (error: { code: number; stdout: string }) => ({ code: error.code, output: error.stdout }),
    );
  };
}

t.test('tsc refuses code that misuses the client', async (t) => {
  const check = await typechecker(t);
  const typecheck = (source: string) =>
    check(
      `import { createContactsClient, login, updateContactIfUnchanged } from 'contacts-sdk';\nconst client = createContactsClient('http://x', async () => null);\n${source}\n`,
    );

  const correct = await typecheck(
    "void client.POST('/api/contacts/', { body: { first_name: 'A', last_name: 'B', email: 'a@b.co', phone: '+14155550123', birthday: '1990-01-01' } });",
  );
  t.same(correct, { code: 0, output: '' }, 'correct usage compiles');

  const wrongField = await typecheck(
    "void client.GET('/api/contacts/{contact_id}', { params: { path: { contact_id: 1 } } }).then((r) => r.data?.firstName);",
  );
  t.not(wrongField.code, 0);
  t.match(wrongField.output, /error TS2551: Property 'firstName' does not exist .* Did you mean 'first_name'\?/);

  const missingField = await typecheck(
    "void client.POST('/api/contacts/', { body: { first_name: 'A', last_name: 'B', email: 'a@b.co', phone: '+14155550123' } });",
  );
  t.not(missingField.code, 0);
  t.match(missingField.output, /Property 'birthday' is missing/);

  const stringId = await typecheck("void client.GET('/api/contacts/{contact_id}', { params: { path: { contact_id: '1' } } });");
  t.not(stringId.code, 0);
  t.match(stringId.output, /usage\.ts\(3,\d+\): error TS2322: Type 'string' is not assignable to type 'number'\./);

  const noPassword = await typecheck("void login(client, { username: 'jane_doe' });");
  t.not(noPassword.code, 0);
  t.match(noPassword.output, /Property 'password' is missing/);

  const unnarrowed = await typecheck(
    "void updateContactIfUnchanged(client, 1, '\"tag\"', { first_name: 'A' }).then((r) => r.contact.first_name);",
  );
  t.not(unnarrowed.code, 0, 'a conditional result must be narrowed on `ok` first');
  t.match(unnarrowed.output, /error TS2339: Property 'contact' does not exist on type 'ConditionalWrite'/);

  const syncRefresh = await typecheck("createContactsClient('http://x', () => null, { refresh: () => 'token' });");
  t.not(syncRefresh.code, 0, 'refresh must be async');
  t.match(syncRefresh.output, /Type 'string' is not assignable to type 'Promise<string \| null>'/);
});

t.test("the README's examples compile", async (t) => {
  const typecheck = await typechecker(t);
  const readme = await readFile('sdk/README.md', 'utf8');
  const examples = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((match) => match[1]!);
  t.equal(examples.length, 6);
  // Each example in a function of its own, with what the text around it supplies.
  const source = [
    "import { ApiError, createContactsClient, getContactWithTag, login, memorySyncStore, refreshTokens, syncContacts, tokenSession, updateContactIfUnchanged, type ContactsClient } from 'contacts-sdk';",
    'declare const baseUrl: string;',
    'declare const client: ContactsClient;',
    'declare const storage: { get(key: string): Promise<string>; set(key: string, value: string): Promise<void> };',
    'declare const savedKey: string;',
    ...examples.map((example, i) => `export async function example${i}() {\n${example.replace(/^import .* from 'contacts-sdk';$/m, '')}}`),
  ].join('\n');
  t.same(await typecheck(source), { code: 0, output: '' });
});
