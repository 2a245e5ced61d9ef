/**
 * The SDK as another team gets it (`npm run sdk:smoke`, run by CI): `npm pack ./sdk`, the tarball
 * installed into an empty project outside this repo, `tsc` there passing a correct client and
 * refusing a string `contact_id`, then that client, compiled, run against the real service
 * (embedded database, temporary DATA_DIR, mail in its outbox). Exits 1 on any failure.
 */
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';

interface Run {
  code: number;
  output: string;
}

/** Runs a command to completion, whatever its exit code; stdout and stderr together. */
function run(file: string, args: string[], options: { cwd: string; env?: NodeJS.ProcessEnv }): Promise<Run> {
  return new Promise((resolve) => {
    execFile(file, args, { ...options, maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, output: stdout + stderr });
    });
  });
}

/** Runs a command that must succeed. */
async function must(step: string, file: string, args: string[], options: { cwd: string; env?: NodeJS.ProcessEnv }): Promise<string> {
  const result = await run(file, args, options);
  if (result.code !== 0) throw new Error(`${step} failed (exit ${result.code}):\n${result.output}`);
  return result.output;
}

const installedVersion = async (name: string) =>
  (JSON.parse(await readFile(path.join(root, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version;

/**
 * The client another team would write: register, verify from the mailed link, log in, create and
 * read a contact, update it on a condition, and sync.
 */
const clientSource = `import assert from 'node:assert/strict';
import { readdir, readFile } from 'node:fs/promises';
import { createContactsClient, getContactWithTag, login, memorySyncStore, syncContacts, tokenSession, updateContactIfUnchanged } from 'contacts-sdk';

const baseUrl = process.env.BASE_URL!;
const outbox = process.env.OUTBOX!;
const session = tokenSession();
const client = createContactsClient(baseUrl, session.getToken, { refresh: session.refresh });

const user = { username: 'smoke_user', email: 'smoke@example.com', password: 'correct-horse-battery' };
const registered = await client.POST('/api/auth/register', { body: user });
assert.equal(registered.response.status, 201);

/** The verification link in the outbox's .eml (quoted-printable may fold it). */
async function mailedToken(): Promise<string> {
  for (let attempt = 0; attempt < 100; attempt++) {
    for (const file of await readdir(outbox).catch(() => [])) {
      const mail = (await readFile(\`\${outbox}/\${file}\`, 'utf8')).replace(/=\\r?\\n/g, '').replace(/=3D/g, '=');
      const link = /https?:\\/\\/\\S+verify-email\\?token=([\\w.-]+)/.exec(mail);
      if (link?.[1]) return link[1];
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error('no verification mail in the outbox');
}
const verified = await client.GET('/api/auth/verify-email', { params: { query: { token: await mailedToken() } } });
assert.deepEqual(verified.data, { message: 'Email verified' });

const loggedIn = await login(client, { username: user.username, password: user.password });
if (loggedIn.error) throw new Error(\`login: \${loggedIn.error.detail}\`);
session.set(loggedIn.data);

const created = await client.POST('/api/contacts/', {
  body: { first_name: 'Ada', last_name: 'Lovelace', email: 'ada@example.com', phone: '+14155550123', birthday: '1990-12-10' },
});
assert.equal(created.response.status, 201);
const id: number = created.data!.id;
const fetched = await client.GET('/api/contacts/{contact_id}', { params: { path: { contact_id: id } } });
assert.equal(fetched.response.status, 200);
assert.deepEqual(fetched.data, created.data);
console.log(\`contact \${id} created and read back through contacts-sdk\`);

const etag = created.response.headers.get('ETag')!;
assert.deepEqual(await getContactWithTag(client, id, etag), { ok: true, notModified: true, etag });
const updated = await updateContactIfUnchanged(client, id, etag, { first_name: 'Augusta' });
if (!updated.ok) throw new Error(\`conditional update: \${updated.reason}\`);
assert.deepEqual(await updateContactIfUnchanged(client, id, etag, { first_name: 'Stale' }), { ok: false, reason: 'changed' });
const store = memorySyncStore();
const synced = await syncContacts(client, store);
assert.equal(synced.full, true);
assert.deepEqual([...store.contacts.values()], [updated.contact]);
console.log('conditional update and sync through contacts-sdk');
`;

/** The same call with a string id: the one error tsc must report. */
const wrongSource = `import { createContactsClient } from 'contacts-sdk';
const client = createContactsClient('http://127.0.0.1', async () => null);
void client.GET('/api/contacts/{contact_id}', { params: { path: { contact_id: '1' } } });
`;

const compilerOptions = {
  target: 'ES2022',
  module: 'NodeNext',
  moduleResolution: 'NodeNext',
  strict: true,
  // The package's own declarations are checked too, not skipped.
  skipLibCheck: false,
  types: ['node'],
};

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** `src/server.ts` on the embedded default in `dataDir`; resolves once /healthz answers. */
async function startService(dataDir: string): Promise<{ url: string; stop(): Promise<void> }> {
  const port = await freePort();
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    NODE_ENV: 'development',
    LOG_LEVEL: 'warn',
    HOST: '127.0.0.1',
    PORT: String(port),
    DATA_DIR: dataDir,
    JWT_SECRET: randomBytes(32).toString('hex'),
  };
  for (const name of ['DATABASE_URL', 'REDIS_URL', 'SMTP_URL', 'MAIL_OUTBOX_DIR', 'PUBLIC_BASE_URL']) delete env[name];
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/server.ts'], { cwd: root, env, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async () => {
    if (child.exitCode === null) child.kill('SIGTERM');
    await exited;
  };
  const url = `http://127.0.0.1:${port}`;
  // A first start on the embedded default runs initdb and the migrations.
  for (let attempt = 0; attempt < 600; attempt++) {
    if (child.exitCode !== null) throw new Error(`the service exited early:\n${stderr}`);
    if (
      await fetch(`${url}/healthz`).then(
        (r) => r.ok,
        () => false,
      )
    )
      return { url, stop };
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  await stop();
  throw new Error(`the service did not start within 60 s:\n${stderr}`);
}

async function main(): Promise<void> {
  const work = await mkdtemp(path.join(tmpdir(), 'contacts-sdk-smoke-'));
  let service: { url: string; stop(): Promise<void> } | undefined;
  try {
    console.log('npm pack ./sdk');
    await must('npm pack', npm, ['pack', './sdk', '--pack-destination', work], { cwd: root });
    const tarballs = (await readdir(work)).filter((name) => name.endsWith('.tgz'));
    if (tarballs.length !== 1) throw new Error(`expected one tarball, found: ${tarballs.join(', ') || 'none'}`);
    const tarball = path.join(work, tarballs[0]!);
    const listing = (await must('tar', 'tar', ['-tzf', tarball], { cwd: work })).split('\n').filter(Boolean).sort();
    const expected = ['package/README.md', 'package/package.json']
      .concat(
        ['account', 'auth', 'client', 'conditional', 'errors', 'index', 'openapi', 'retries', 'sync'].flatMap((name) => [
          `package/dist/${name}.d.ts`,
          `package/dist/${name}.js`,
        ]),
      )
      .sort();
    if (JSON.stringify(listing) !== JSON.stringify(expected)) {
      throw new Error(`the tarball holds\n  ${listing.join('\n  ')}\nnot\n  ${expected.join('\n  ')}`);
    }

    const project = path.join(work, 'consumer');
    await mkdir(project);
    await must('npm init', npm, ['init', '-y'], { cwd: project });
    const manifestPath = path.join(project, 'package.json');
    await writeFile(manifestPath, JSON.stringify({ ...JSON.parse(await readFile(manifestPath, 'utf8')), type: 'module' }, null, 2));
    const dependencies = [
      tarball,
      `openapi-fetch@${await installedVersion('openapi-fetch')}`,
      `typescript@${await installedVersion('typescript')}`,
      `@types/node@${await installedVersion('@types/node')}`,
    ];
    console.log(`npm install ${[path.basename(tarball), ...dependencies.slice(1)].join(' ')} (in an empty project)`);
    await must('npm install', npm, ['install', '--prefer-offline', '--no-audit', '--no-fund', ...dependencies], { cwd: project });

    const tsc = path.join(project, 'node_modules/typescript/bin/tsc');
    await writeFile(path.join(project, 'client.ts'), clientSource);
    await writeFile(path.join(project, 'wrong.ts'), wrongSource);
    await writeFile(path.join(project, 'tsconfig.json'), JSON.stringify({ compilerOptions, files: ['client.ts'] }, null, 2));
    await writeFile(
      path.join(project, 'tsconfig.wrong.json'),
      JSON.stringify({ compilerOptions: { ...compilerOptions, noEmit: true }, files: ['wrong.ts'] }, null, 2),
    );

    await must('tsc on the correct client', process.execPath, [tsc, '-p', 'tsconfig.json'], { cwd: project });
    console.log('tsc: client.ts compiles');
    const wrong = await run(process.execPath, [tsc, '-p', 'tsconfig.wrong.json'], { cwd: project });
    const errors = wrong.output.split('\n').filter((line) => /error TS\d+/.test(line));
    const expectedError = /^wrong\.ts\(3,\d+\): error TS2322: Type 'string' is not assignable to type 'number'\.$/;
    if (wrong.code === 0 || errors.length !== 1 || !expectedError.test(errors[0]!)) {
      throw new Error(`tsc should refuse only the string contact_id in wrong.ts (exit ${wrong.code}):\n${wrong.output}`);
    }
    console.log(`tsc: wrong.ts refused: ${errors[0]}`);

    const dataDir = path.join(work, 'data');
    service = await startService(dataDir);
    console.log(`service on ${service.url}; node client.js`);
    const output = await must('the client', process.execPath, ['client.js'], {
      cwd: project,
      env: { ...process.env, BASE_URL: service.url, OUTBOX: path.join(dataDir, 'outbox') },
    });
    process.stdout.write(output);
    console.log('sdk smoke test passed');
  } finally {
    await service?.stop();
    await rm(work, { recursive: true, force: true });
  }
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? error.message : error);
  process.exit(1);
});
