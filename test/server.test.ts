/** The process entry (src/server.ts) as a real process: start-up warnings and graceful SIGTERM. */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { readdir, readFile, stat } from 'node:fs/promises';
import http from 'node:http';
import { createServer } from 'node:net';
import path from 'node:path';
import t from 'tap';
import { freePort, testEnv } from './helper.js';

t.test('SIGTERM lets a request in flight finish, then the process exits 0', async (t) => {
  const port = await freePort();
  // Cost 14 (about a second a hash) keeps a login in flight well past the moment the signal lands.
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    ...(await testEnv(t)),
    NODE_ENV: 'production',
    LOG_LEVEL: 'info',
    BCRYPT_COST: '14',
    PORT: String(port),
  };
  delete env.REDIS_URL;
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/server.ts'], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  t.teardown(() => void child.kill('SIGKILL'));
  const url = `http://127.0.0.1:${port}`;
  for (
    let i = 0;
    i < 300 &&
    !(await fetch(`${url}/healthz`).then(
      (r) => r.ok,
      () => false,
    ));
    i++
  ) {
    await new Promise((resolve) => setTimeout(resolve, 100));
  }

  t.match(
    output,
    /Neither REDIS_URL nor REDIS_CLUSTER_URLS is set: rate-limit counters and the cache are per instance, not shared/,
    'production without Redis warns',
  );

  // Over a keep-alive connection, as a load balancer would hold it.
  const agent = new http.Agent({ keepAlive: true });
  t.teardown(() => agent.destroy());
  const inFlight = new Promise<{ status: number; connection: string | undefined; body: string }>((resolve, reject) => {
    const request = http.request(
      `${url}/api/auth/login`,
      { method: 'POST', agent, headers: { 'content-type': 'application/x-www-form-urlencoded' } },
      (res) => {
        let body = '';
        res.on('data', (chunk: Buffer) => (body += chunk.toString()));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, connection: res.headers.connection, body }));
      },
    );
    request.on('error', reject);
    request.end('username=nobody&password=whatever-password');
  });
  await new Promise((resolve) => setTimeout(resolve, 300));
  const exited = once(child, 'exit');
  child.kill('SIGTERM');
  const response = await inFlight;
  t.equal(response.status, 401, 'the request in flight got its answer');
  t.equal(response.body, JSON.stringify({ detail: 'Incorrect username or password' }));
  t.equal(response.connection, 'close', 'the answer closes its keep-alive connection, so the close is not held up');
  const [code] = await exited;
  t.equal(code, 0, 'exit code 0');
  t.match(output, /closing: finishing requests in flight/);
  const refused = await fetch(`${url}/healthz`).then(
    () => 'answered',
    () => 'refused',
  );
  t.equal(refused, 'refused', 'no longer listening');
});

/** Runs src/server.ts to its exit; resolves with its exit code and output. */
async function runToExit(env: NodeJS.ProcessEnv): Promise<{ code: number | null; stdout: string; stderr: string; ms: number }> {
  const started = Date.now();
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/server.ts'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const [code] = (await once(child, 'exit')) as [number | null];
  return { code, stdout, stderr, ms: Date.now() - started };
}

t.test('start-up failures are one line with a hint, and the process exits 1', async (t) => {
  const base: NodeJS.ProcessEnv = { PATH: process.env.PATH, ...(await testEnv(t)), LOG_LEVEL: 'warn' };
  delete base.REDIS_URL;

  const taken = createServer().listen(0, '127.0.0.1');
  await once(taken, 'listening');
  t.teardown(() => taken.close());
  const { port } = taken.address() as { port: number };
  const portInUse = await runToExit({ ...base, PORT: String(port) });
  t.equal(portInUse.code, 1);
  t.equal(portInUse.stderr, `Start-up failed: port ${port} on 127.0.0.1 is already in use: stop the other process, or set PORT\n`);
  t.ok(portInUse.ms < 30_000, `and promptly (${portInUse.ms} ms)`);

  const nowhere = await freePort();
  const noDatabase = await runToExit({
    ...base,
    PORT: String(await freePort()),
    DATABASE_URL: `postgres://postgres:hunter2@127.0.0.1:${nowhere}/nowhere`,
  });
  t.equal(noDatabase.code, 1);
  t.match(
    noDatabase.stderr,
    new RegExp(
      `^Start-up failed: database not reachable at postgres://postgres:\\*\\*\\*@127\\.0\\.0\\.1:${nowhere}/nowhere \\(Error: connect ECONNREFUSED 127\\.0\\.0\\.1:${nowhere}\\): ` +
        'start PostgreSQL, or fix DATABASE_URL \\(unset, the embedded database in DATA_DIR is used\\)\\n$',
    ),
    'one line, the password masked',
  );
});

t.test('what the process writes is private to its user, and production logs carry no live link', async (t) => {
  const port = await freePort();
  const dataDir = path.join((await testEnv(t)).DATA_DIR!, 'fresh');
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    NODE_ENV: 'production',
    LOG_LEVEL: 'info',
    DATA_DIR: dataDir,
    JWT_SECRET: randomBytes(48).toString('base64'),
    BCRYPT_COST: '4',
    PORT: String(port),
  };
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/server.ts'], { env, stdio: ['ignore', 'pipe', 'inherit'] });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  t.teardown(() => void child.kill('SIGKILL'));
  const url = `http://127.0.0.1:${port}`;
  for (
    let i = 0;
    i < 600 &&
    !(await fetch(`${url}/healthz`).then(
      (r) => r.ok,
      () => false,
    ));
    i++
  ) {
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  t.match(
    output,
    /"msg":"creating the embedded database \(first start: a few seconds\)"[^]*"msg":"database migrated"/,
    'the silent first initdb is announced',
  );

  const registered = await fetch(`${url}/api/auth/register`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username: 'private_files', email: 'private@example.com', password: 'correct-horse-battery' }),
  });
  t.equal(registered.status, 201);
  const outbox = path.join(dataDir, 'outbox');
  const [mail] = await readdir(outbox);
  const modeOf = async (file: string) => ((await stat(file)).mode & 0o777).toString(8);
  t.equal(await modeOf(dataDir), '700');
  t.equal(await modeOf(path.join(dataDir, 'pgdata')), '700');
  t.equal(await modeOf(outbox), '700');
  t.equal(await modeOf(path.join(outbox, mail!)), '600', 'the mail with its live link');
  const open = [];
  for (const entry of await readdir(path.join(dataDir, 'pgdata'), { recursive: true, withFileTypes: true })) {
    const file = path.join(entry.parentPath, entry.name);
    if (((await stat(file)).mode & 0o077) !== 0) open.push(file);
  }
  t.same(open, [], 'no database file is readable by others');

  const token = /token=([\w.-]+)/.exec((await readFile(path.join(outbox, mail!), 'utf8')).replace(/=\r?\n/g, ''))?.[1];
  t.ok(token, 'the mail carries the link');
  t.match(output, /"msg":"mail written to the outbox"/);
  t.notMatch(output, token!.slice(-20), 'the log does not');

  // The query parser decodes parameter names, so these reach their operations as `token`.
  // The mail is quoted-printable, where the link's "=" is written "=3D".
  const live = token!.replace(/^3D/, '');
  const sync = await fetch(`${url}/api/contacts/sync?%74oken=sync-cursor-${'s'.repeat(20)}`);
  t.equal(sync.status, 401);
  const page = await fetch(`${url}/reset-password?%74ok%65n=${live}`);
  t.equal(page.status, 200);
  const verified = await fetch(`${url}/api/auth/verify-email?%74oken=${live}`);
  t.equal(verified.status, 200, 'a percent-encoded name is accepted');
  await new Promise((resolve) => setTimeout(resolve, 200));
  t.match(output, '"url":"/api/auth/verify-email?%74oken=[REDACTED]"');
  t.match(output, '"url":"/reset-password?%74ok%65n=[REDACTED]"');
  t.match(output, '"url":"/api/contacts/sync?%74oken=[REDACTED]"');
  t.notMatch(output, live.slice(-20), 'nor the log after the link was used with its name percent-encoded');
  t.notMatch(output, 's'.repeat(20));
});
