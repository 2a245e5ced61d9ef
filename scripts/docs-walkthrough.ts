/**
 * A manual check, not part of the test suite: a new user's whole account flow done only through the
 * /docs page, in headless Chromium (Debian's package) driven by playwright-core. It starts the
 * service on the embedded default on a free port, registers with "Try it out", takes the
 * verification link from the outbox, verifies, logs in with the form, authorizes with the access
 * token, calls /me, refreshes and logs out, saving a screenshot of each step.
 *
 *   npx tsx scripts/docs-walkthrough.ts [screenshot folder]   (default: $TMPDIR/contacts-walkthrough-shots)
 */
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { chromium, type Locator, type Page } from 'playwright-core';

const shots = path.resolve(process.argv[2] ?? path.join(tmpdir(), 'contacts-walkthrough-shots'));
const dataDir = await mkdtemp(path.join(tmpdir(), 'contacts-walkthrough-'));

const port = await new Promise<number>((resolve) => {
  const probe = createServer().listen(0, '127.0.0.1', () => {
    const { port } = probe.address() as { port: number };
    probe.close(() => resolve(port));
  });
});
const base = `http://127.0.0.1:${port}`;

const env: NodeJS.ProcessEnv = {
  ...process.env,
  HOST: '127.0.0.1',
  PORT: String(port),
  DATA_DIR: dataDir,
  LOG_LEVEL: 'warn',
  NODE_ENV: 'development',
};
for (const name of ['DATABASE_URL', 'REDIS_URL', 'SMTP_URL', 'PUBLIC_BASE_URL', 'MAIL_OUTBOX_DIR', 'JWT_SECRET']) delete env[name];
const server = spawn('npx', ['tsx', 'src/server.ts'], { env, stdio: ['ignore', 'inherit', 'inherit'], detached: true });

const step = (text: string) => console.log(`• ${text}`);

async function waitForService(): Promise<void> {
  for (let i = 0; i < 240; i++) {
    const ready = await fetch(`${base}/readyz`).then(
      (r) => r.ok,
      () => false,
    );
    if (ready) return;
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  throw new Error('the service did not become ready');
}

/** The outbox's newest message's first link, with quoted-printable soft breaks undone. */
async function outboxLink(): Promise<string> {
  const outbox = path.join(dataDir, 'outbox');
  for (let i = 0; i < 40; i++) {
    const files = (await readdir(outbox).catch(() => [])).filter((f) => f.endsWith('.eml')).sort();
    const newest = files.at(-1);
    if (newest) {
      const raw = (await readFile(path.join(outbox, newest), 'utf8')).replace(/=\r?\n/g, '').replace(/=3D/g, '=');
      const link = /https?:\/\/[^\s"<>]+/.exec(raw)?.[0];
      if (link) return link;
    }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  throw new Error(`no mail in ${outbox}`);
}

/** Expands an operation of the Swagger UI page and switches it to "Try it out". */
async function tryItOut(page: Page, tag: string, operationId: string): Promise<Locator> {
  const block = page.locator(`#operations-${tag}-${operationId}`);
  await block.locator('.opblock-summary').first().click();
  await block.getByRole('button', { name: 'Try it out' }).click();
  return block;
}

/** Presses Execute and returns the live response's status and body text. */
async function execute(page: Page, block: Locator, name: string): Promise<{ status: number; body: string }> {
  await block.getByRole('button', { name: 'Execute' }).click();
  const row = block.locator('.live-responses-table tbody tr.response').first();
  await row.waitFor();
  const status = Number(await row.locator('.response-col_status').innerText());
  const body = (
    await row
      .locator('.response-col_description pre')
      .first()
      .innerText()
      .catch(() => '')
  ).trim();
  await block.scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(shots, `${name}.png`), fullPage: false });
  console.log(`  → ${status} ${body.replace(/\s+/g, ' ').slice(0, 160)}`);
  return { status, body };
}

function expectStatus(actual: number, expected: number, what: string) {
  if (actual !== expected) throw new Error(`${what}: expected ${expected}, got ${actual}`);
}

let exitCode = 0;
let page: Page | undefined;
const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: [
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
  ],
});
try {
  await mkdir(shots, { recursive: true });
  step(`starting the service on ${base} (embedded PostgreSQL in ${dataDir})`);
  await waitForService();

  page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  // Attempts to reach other hosts, and those that got an answer (the page's CSP should stop every one).
  const foreign: string[] = [];
  const fetchedForeign: string[] = [];
  const isForeign = (url: string) => !url.startsWith(base) && !url.startsWith('data:') && !url.startsWith('blob:');
  const problems: string[] = [];
  page.on('request', (request) => {
    if (isForeign(request.url())) foreign.push(request.url());
  });
  page.on('response', (response) => {
    if (isForeign(response.url())) fetchedForeign.push(response.url());
    // 401 is the refresh after logout, asked for on purpose.
    if (response.status() >= 400 && response.status() !== 401) problems.push(`${response.status()} ${response.url()}`);
  });
  page.on('console', (message) => {
    if (message.type() === 'error' && !message.text().startsWith('Failed to load resource')) problems.push(message.text());
  });
  page.on('pageerror', (error) => problems.push(error.message));

  step('opening /docs');
  await page.goto(`${base}/docs`);
  await page.locator('#operations-auth-registerUser').waitFor();
  await page.screenshot({ path: path.join(shots, '01-docs.png') });

  const username = `walker${Date.now().toString(36).slice(-5)}`;
  const email = `${username}@example.com`;
  const password = 'correct-horse-battery';

  step(`registering ${username} with "Try it out"`);
  const register = await tryItOut(page, 'auth', 'registerUser');
  await register.locator('textarea.body-param__text').fill(JSON.stringify({ username, email, password }, null, 2));
  expectStatus((await execute(page, register, '02-register')).status, 201, 'register');

  const link = await outboxLink();
  step(`verification link from the outbox: ${link.replace(/token=.*/, 'token=…')}`);
  const token = new URL(link).searchParams.get('token') ?? '';
  const verify = await tryItOut(page, 'auth', 'verifyEmail');
  await verify.locator('input[placeholder="token"]').fill(token);
  expectStatus((await execute(page, verify, '03-verify')).status, 200, 'verify');

  step('logging in with the form (application/x-www-form-urlencoded)');
  const login = await tryItOut(page, 'auth', 'login');
  await login.locator('input[placeholder="username"]').fill(username);
  await login.locator('input[placeholder="password"]').fill(password);
  const loggedIn = await execute(page, login, '04-login');
  expectStatus(loggedIn.status, 200, 'login');
  const tokens = JSON.parse(loggedIn.body) as { access_token: string; refresh_token: string };

  step('Authorize with the access token');
  await page.locator('.scheme-container .authorize').click();
  const dialog = page.locator('.dialog-ux .modal-ux');
  await dialog.locator('input').first().fill(tokens.access_token);
  await dialog.locator('.auth-btn-wrapper button.authorize').click();
  await dialog.locator('button', { hasText: 'Logout' }).waitFor();
  await page.screenshot({ path: path.join(shots, '05-authorized.png') });
  await dialog.locator('button', { hasText: 'Close' }).click();

  step('GET /api/users/me');
  const me = await tryItOut(page, 'users', 'getCurrentUser');
  const user = await execute(page, me, '06-me');
  expectStatus(user.status, 200, 'me');
  if (!user.body.includes(`"is_verified": true`)) throw new Error('/me does not show a verified user');

  step('refreshing');
  const refresh = await tryItOut(page, 'auth', 'refreshToken');
  await refresh.locator('textarea.body-param__text').fill(JSON.stringify({ refresh_token: tokens.refresh_token }, null, 2));
  expectStatus((await execute(page, refresh, '07-refresh')).status, 200, 'refresh');

  step('logging out');
  const logout = await tryItOut(page, 'auth', 'logout');
  expectStatus((await execute(page, logout, '08-logout')).status, 204, 'logout');

  step('refreshing again: the refresh token was revoked');
  expectStatus((await execute(page, refresh, '09-refresh-after-logout')).status, 401, 'refresh after logout');

  step('opening /redoc');
  await page.goto(`${base}/redoc`);
  await page.getByText('Contacts service', { exact: false }).first().waitFor();
  await page.locator('[data-section-id="tag/auth"]').first().waitFor();
  await page.screenshot({ path: path.join(shots, '10-redoc.png') });

  console.log(`attempts to reach other hosts: ${foreign.length === 0 ? 'none' : foreign.join(', ')}`);
  console.log(`answers from other hosts: ${fetchedForeign.length === 0 ? 'none' : fetchedForeign.join(', ')}`);
  console.log(`errors: ${problems.length === 0 ? 'none' : problems.join(' | ')}`);
  if (fetchedForeign.length > 0 || problems.some((p) => !p.includes('cdn.redoc.ly'))) exitCode = 1;
  console.log(`screenshots in ${shots}`);
} catch (error) {
  console.error(error);
  await page?.screenshot({ path: path.join(shots, 'failure.png') });
  exitCode = 1;
} finally {
  await browser.close();
  if (server.exitCode === null && server.pid) {
    const exited = new Promise((resolve) => server.once('exit', resolve));
    process.kill(-server.pid, 'SIGTERM');
    await exited;
  }
  await rm(dataDir, { recursive: true, force: true });
}
process.exit(exitCode);
