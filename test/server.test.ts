/** The process entry (src/server.ts) as a real process: start-up warnings and graceful SIGTERM. */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import http from 'node:http';
import { createServer } from 'node:net';
import t from 'tap';
import { testEnv } from './helper.js';

async function freePort(): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  server.close();
  await once(server, 'close');
  return port;
}

t.test('SIGTERM lets a request in flight finish, then the process exits 0', async (t) => {
  const port = await freePort();
  // Cost 14 (about a second a hash) keeps a login in flight well past the moment the signal lands.
  const env: NodeJS.ProcessEnv = { ...process.env, ...(await testEnv(t)), NODE_ENV: 'production', LOG_LEVEL: 'info', BCRYPT_COST: '14', PORT: String(port) };
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
  for (let i = 0; i < 300 && !(await fetch(`${url}/healthz`).then((r) => r.ok, () => false)); i++) {
    await new Promise((resolve) => setTimeout(resolve, 100));
  }

  t.match(output, /REDIS_URL is not set: rate-limit counters and the cache are per instance, not shared/, 'production without Redis warns');

  // Over a keep-alive connection, as a load balancer would hold it.
  const agent = new http.Agent({ keepAlive: true });
  t.teardown(() => agent.destroy());
  const inFlight = new Promise<{ status: number; connection: string | undefined; body: string }>((resolve, reject) => {
    const request = http.request(`${url}/api/auth/login`, { method: 'POST', agent, headers: { 'content-type': 'application/x-www-form-urlencoded' } }, (res) => {
      let body = '';
      res.on('data', (chunk: Buffer) => (body += chunk.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, connection: res.headers.connection, body }));
    });
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
  const refused = await fetch(`${url}/healthz`).then(() => 'answered', () => 'refused');
  t.equal(refused, 'refused', 'no longer listening');
});
