/**
 * The two schema-first properties, each shown on a copy of the project so the real files stay
 * untouched: a bound changed in openapi.yaml changes what the service accepts after codegen alone,
 * and a handler that no longer fits the regenerated types fails `tsc`.
 */
import { execFile } from 'node:child_process';
import { cp, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { parse, stringify } from 'yaml';
import { build, testEnv } from '../helper.js';

const root = fileURLToPath(new URL('../..', import.meta.url));

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a command to completion, whatever its exit code. */
function run(file: string, args: string[], options: { cwd: string; env?: NodeJS.ProcessEnv }): Promise<Run> {
  return new Promise((resolve) => {
    execFile(file, args, { ...options, maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, stdout, stderr });
    });
  });
}

/** Runs a TypeScript file of the copy with tsx, as `npm run codegen` does. */
const tsx = (cwd: string, args: string[], env?: NodeJS.ProcessEnv) => run(process.execPath, ['--import', 'tsx', ...args], { cwd, env });

/** A copy of the project (sharing node_modules), removed at teardown. */
async function projectCopy(t: Parameters<typeof testEnv>[0], entries: string[]): Promise<string> {
  const dir = await mkdtemp(path.join(tmpdir(), 'contacts-codegen-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  for (const entry of entries) await cp(path.join(root, entry), path.join(dir, entry), { recursive: true });
  await symlink(path.join(root, 'node_modules'), path.join(dir, 'node_modules'), 'dir');
  return dir;
}

/** Rewrites the copy's openapi.yaml through `edit`. */
async function editSpec(dir: string, edit: (spec: any) => void): Promise<void> {
  const file = path.join(dir, 'openapi.yaml');
  const spec = parse(await readFile(file, 'utf8'));
  edit(spec);
  await writeFile(file, stringify(spec));
}

t.test(
  'a maxLength changed in openapi.yaml changes what the service accepts, after codegen alone (a body field and a header)',
  async (t) => {
    const attempt = (username: string) => ({ username, email: `${username}@example.com`, password: 'correct-horse-battery' });

    // Today: a 6-character username is fine.
    const app = await build(t);
    const today = await app.inject({ method: 'POST', url: '/api/auth/register', payload: attempt('abcdef') });
    t.equal(today.statusCode, 201, 'a 6-character username is accepted under maxLength 32');

    const dir = await projectCopy(t, ['openapi.yaml', 'package.json', 'tsconfig.json', 'plugins', 'scripts', 'src']);
    await editSpec(dir, (spec) => {
      t.equal(spec.components.schemas.Username.maxLength, 32);
      spec.components.schemas.Username.maxLength = 5;
      t.equal(spec.components.parameters['Idempotency-Key'].schema.maxLength, 255);
      spec.components.parameters['Idempotency-Key'].schema.maxLength = 10;
    });
    const stale = await tsx(dir, ['scripts/codegen.ts', '--check']);
    t.equal(stale.code, 1, 'the CI check notices that the generated files drifted');
    t.match(stale.stderr, 'Generated files are stale: src/generated/operations.ts.');
    const codegen = await tsx(dir, ['scripts/codegen.ts']);
    t.equal(codegen.code, 0, codegen.stderr);

    // The copy's own app, built from its regenerated table, registers the same kind of users.
    await writeFile(
      path.join(dir, 'register.ts'),
      `import { loadConfig } from './plugins/config.js';
import { buildApp } from './src/app.js';
const app = await buildApp({ config: await loadConfig() });
const answers = [];
for (const payload of JSON.parse(process.argv[2] ?? '[]')) {
  const res = await app.inject({ method: 'POST', url: '/api/auth/register', payload });
  answers.push({ statusCode: res.statusCode, body: res.json() });
}
// A header parameter's bound, checked before the create's body.
const userId = answers.find((answer) => answer.statusCode === 201).body.id;
const keyed = await app.inject({
  method: 'POST',
  url: '/api/contacts/',
  headers: { authorization: \`Bearer \${app.tokens.sign(userId, 'access', 60)}\`, 'idempotency-key': 'k'.repeat(11) },
  payload: { first_name: 'Ada', last_name: 'Lovelace', email: 'ada@example.com', phone: '+14155550123', birthday: '1990-12-10' },
});
answers.push({ statusCode: keyed.statusCode, body: keyed.json() });
process.stdout.write(JSON.stringify(answers));
await app.close();
`,
    );
    const env = { ...process.env, ...(await testEnv(t)) };
    const result = await tsx(dir, ['register.ts', JSON.stringify([attempt('ghijkl'), attempt('mnopq')])], env);
    t.equal(result.code, 0, result.stderr);
    const [sixCharacters, fiveCharacters, longKey] = JSON.parse(result.stdout) as { statusCode: number; body: Record<string, unknown> }[];
    t.same(
      sixCharacters,
      { statusCode: 422, body: { detail: 'body/username must NOT have more than 5 characters' } },
      'a 6-character username is now refused',
    );
    t.equal(fiveCharacters?.statusCode, 201, 'a 5-character username still fits');
    t.equal(fiveCharacters?.body.username, 'mnopq');
    t.same(
      longKey,
      { statusCode: 422, body: { detail: 'header/idempotency-key must NOT have more than 10 characters' } },
      'an 11-character Idempotency-Key is now refused',
    );
  },
);

t.test('a handler whose types no longer fit openapi.yaml fails tsc', async (t) => {
  const dir = await projectCopy(t, [
    'openapi.yaml',
    'package.json',
    'tsconfig.json',
    'scripts/codegen.ts',
    'scripts/dereference.ts',
    'src/operation-types.ts',
  ]);
  // A handler written against today's User schema, type-checked on its own with the generated types.
  await writeFile(
    path.join(dir, 'src/probe.routes.ts'),
    `import type { OperationHandlers } from './operation-types.js';

export const probeHandlers = {
  getCurrentUser: async (request) => ({
    status: 200,
    body: { id: request.userId, username: 'jane_doe', email: 'jane@example.com', created_at: '2025-01-31T09:30:00.123Z', avatar: null, is_verified: true },
  }),
} satisfies Partial<OperationHandlers>;
`,
  );
  await writeFile(path.join(dir, 'tsconfig.probe.json'), JSON.stringify({ extends: './tsconfig.json', include: ['src/probe.routes.ts'] }));
  const typecheck = () =>
    run(process.execPath, [path.join(root, 'node_modules/typescript/bin/tsc'), '--noEmit', '-p', 'tsconfig.probe.json'], { cwd: dir });

  const codegen = await tsx(dir, ['scripts/codegen.ts']);
  t.equal(codegen.code, 0, codegen.stderr);
  const fits = await typecheck();
  t.equal(fits.code, 0, `the handler fits the spec as it is: ${fits.stdout}`);

  // The spec renames the user's `email` to `email_address`.
  await editSpec(dir, (spec) => {
    const user = spec.components.schemas.User;
    user.properties.email_address = user.properties.email;
    delete user.properties.email;
    user.required = user.required.map((name: string) => (name === 'email' ? 'email_address' : name));
  });
  const regenerated = await tsx(dir, ['scripts/codegen.ts']);
  t.equal(regenerated.code, 0, regenerated.stderr);
  const broken = await typecheck();
  t.equal(broken.code, 2, 'tsc fails');
  t.match(broken.stdout, /src\/probe\.routes\.ts\(\d+,\d+\): error TS\d+: /, 'at the handler');
  t.match(broken.stdout, /'email' does not exist in type|Property 'email_address' is missing/, 'naming the field that moved');
  t.notMatch(broken.stdout, /src\/(operation-types|generated)\//, 'and nowhere else');
});

t.test(
  'a new contact field is openapi.yaml, a migration and the table type: the API then accepts, returns, filters and sorts it',
  async (t) => {
    // tsc checks scripts/ too, and scripts/seed.ts draws from test/random.ts.
    const dir = await projectCopy(t, ['openapi.yaml', 'package.json', 'tsconfig.json', 'plugins', 'scripts', 'src', 'test/random.ts']);
    const nickname = { type: ['string', 'null'], maxLength: 30, example: 'Ace' };
    await editSpec(dir, (spec) => {
      const { Contact, ContactCreate, ContactPatch } = spec.components.schemas;
      Contact.properties.nickname = { ...nickname, 'x-filter': ['eq', 'startswith', 'contains'], 'x-sort': true };
      Contact.required.push('nickname');
      ContactCreate.properties.nickname = nickname;
      ContactPatch.properties.nickname = nickname;
    });
    // After the last migration: the test database starts migrated, and Kysely refuses one that sorts before an applied one.
    const migrationsDir = path.join(dir, 'src/db/migrations');
    const last = (await readdir(migrationsDir))
      .filter((file) => /^\d{3}-/.test(file))
      .sort()
      .at(-1)!;
    const migration = `${String(Number(last.slice(0, 3)) + 1).padStart(3, '0')}-nickname`;
    await writeFile(
      path.join(migrationsDir, `${migration}.ts`),
      `import { type Kysely, sql } from 'kysely';\nexport async function up(db: Kysely<any>): Promise<void> {\n  await sql\`alter table contacts add column nickname text\`.execute(db);\n}\n`,
    );
    const index = path.join(migrationsDir, 'index.ts');
    await writeFile(
      index,
      (await readFile(index, 'utf8'))
        .replace(/^(import .*\n)(?!import)/m, `$1import * as nickname from './${migration}.js';\n`)
        .replace(/\n};\n$/, `\n  '${migration}': nickname,\n};\n`),
    );
    const tables = path.join(dir, 'src/db/database.ts');
    // The first additional_data column is the contacts table's.
    await writeFile(
      tables,
      (await readFile(tables, 'utf8')).replace(
        '  additional_data: ColumnType<',
        '  nickname: string | null;\n  additional_data: ColumnType<',
      ),
    );

    const codegen = await tsx(dir, ['scripts/codegen.ts']);
    t.equal(codegen.code, 0, codegen.stderr);
    const typecheck = await run(process.execPath, [path.join(root, 'node_modules/typescript/bin/tsc'), '--noEmit', '-p', 'tsconfig.json'], {
      cwd: dir,
    });
    t.equal(typecheck.code, 0, `no other edit is needed for tsc: ${typecheck.stdout}`);

    await writeFile(
      path.join(dir, 'nickname.ts'),
      `import { loadConfig } from './plugins/config.js';
import { buildApp } from './src/app.js';
const app = await buildApp({ config: await loadConfig() });
const [user] = await app.db.insertInto('users').values({ username: 'nick', email: 'nick@example.com', password_hash: 'x', is_verified: true }).returning('id').execute();
const headers = { authorization: 'Bearer ' + app.tokens.sign(user.id, 'access', 600) };
const call = async (method, url, payload) => {
  const res = await app.inject({ method, url, headers, ...(payload ? { payload } : {}) });
  return { status: res.statusCode, body: res.json() };
};
const person = (first_name, nickname) => ({ first_name, last_name: 'Doe', email: first_name + '@example.com', phone: '+14155550123', birthday: '1990-05-17', ...(nickname === undefined ? {} : { nickname }) });
const created = [await call('POST', '/api/contacts/', person('Ann', 'Bee')), await call('POST', '/api/contacts/', person('Bob', 'Ace')), await call('POST', '/api/contacts/', person('Cy'))];
const names = async (url) => (await call('GET', url)).body.map((c) => c.first_name);
const answers = {
  created: created.map((r) => [r.status, r.body.nickname]),
  read: (await call('GET', '/api/contacts/' + created[0].body.id)).body.nickname,
  patched: (await call('PATCH', '/api/contacts/' + created[2].body.id, { nickname: 'Cat' })).body.nickname,
  tooLong: await call('POST', '/api/contacts/', person('Dee', 'x'.repeat(31))),
  eq: await names('/api/contacts/?query=nickname:eq:Ace'),
  startswith: await names('/api/contacts/?query=nickname:startswith:C'),
  badOperator: (await call('GET', '/api/contacts/?query=nickname:like:A%25')).body,
  sorted: await names('/api/contacts/?sort=nickname'),
  sortedDown: await names('/api/contacts/?sort=-nickname'),
};
process.stdout.write(JSON.stringify(answers));
await app.close();
`,
    );
    const result = await tsx(dir, ['nickname.ts'], { ...process.env, ...(await testEnv(t)) });
    t.equal(result.code, 0, result.stderr);
    t.same(JSON.parse(result.stdout), {
      created: [
        [201, 'Bee'],
        [201, 'Ace'],
        [201, null],
      ],
      read: 'Bee',
      patched: 'Cat',
      tooLong: { status: 422, body: { detail: 'body/nickname must NOT have more than 30 characters' } },
      eq: ['Bob'],
      startswith: ['Cy'],
      badOperator: { detail: "Invalid filter operator 'like' for field 'nickname'" },
      sorted: ['Bob', 'Ann', 'Cy'],
      sortedDown: ['Cy', 'Ann', 'Bob'],
    });
  },
);
