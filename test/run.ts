/**
 * The single test command (`npm test`): runs the whole tap suite once per storage backend and
 * ends with one line, `N passed, N failed, N skipped`, summed over both runs. The counts are
 * leaf assertions (t.ok, t.equal, ...), not subtests or files.
 *
 *   npm test                                  both backends, postgres first
 *   npm test -- test/auth/login.test.ts       any other argument goes to tap
 *   npm test -- --backend embedded            one backend only
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Parser, type Result } from 'tap-parser';

const BACKENDS = ['postgres', 'embedded'] as const;
type Backend = (typeof BACKENDS)[number];
type Tally = { pass: number; fail: number; skip: number };

const root = fileURLToPath(new URL('..', import.meta.url));
const tapBin = fileURLToPath(new URL('../node_modules/tap/dist/esm/run.mjs', import.meta.url));

let only: string | undefined;
const tapArgs: string[] = [];
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const a = argv[i]!;
  if (a === '--backend') only = argv[++i];
  else if (a.startsWith('--backend=')) only = a.slice('--backend='.length);
  else tapArgs.push(a);
}
if (only !== undefined && !(BACKENDS as readonly string[]).includes(only)) {
  console.error(`--backend must be one of: ${BACKENDS.join(', ')}`);
  process.exit(2);
}

// On a terminal: tap's `base` reporter, raw TAP saved with --output-file. Elsewhere (CI, pipes):
// raw TAP, teed from tap's stdout, because `base` redraws a live box on a non-TTY and, with
// CI=true and --output-file, loses its final summary.
const userReporter = tapArgs.some((a) => /^(-R|--reporter\b)/.test(a));
const tee = !userReporter && !process.stdout.isTTY;

function envFor(backend: Backend): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, TEST_BACKEND: backend };
  if (backend === 'postgres') {
    env.DATABASE_URL ??= 'postgres://postgres@127.0.0.1:5432/postgres';
    env.REDIS_URL ??= 'redis://127.0.0.1:6379';
  } else {
    // embedded = PGlite + in-process cache, which the service picks when these are absent
    delete env.DATABASE_URL;
    delete env.REDIS_URL;
  }
  return env;
}

/**
 * tap-parser emits every test point of every nested subtest. A point that closes a subtest is
 * not counted itself, only the assertions inside it; but if it failed with nothing failing
 * inside (a test file that crashed or exited non-zero, a timeout, a bad plan) it counts as 1.
 */
function tallyTap(tap: string): { total: Tally; failedFiles: string[] } {
  const asserts = new Map<Parser, Result[]>();
  const children = new Map<Parser, Parser[]>();
  const watch = (p: Parser): void => {
    asserts.set(p, []);
    children.set(p, []);
    p.on('assert', (r: Result) => asserts.get(p)!.push(r));
    p.on('child', (c: Parser) => {
      children.get(p)!.push(c);
      watch(c);
    });
  };
  const tally = (p: Parser): Tally => {
    const t: Tally = { pass: 0, fail: 0, skip: 0 };
    const closers = new Map(children.get(p)!.map((c) => [c.closingTestPoint, c]));
    for (const r of asserts.get(p)!) {
      const child = closers.get(r);
      if (child) {
        const s = tally(child);
        t.pass += s.pass;
        t.fail += s.fail;
        t.skip += s.skip;
        if (!r.ok && !r.todo && !r.skip && s.fail === 0) t.fail++;
      } else if (r.todo || r.skip) t.skip++;
      else if (r.ok) t.pass++;
      else t.fail++;
    }
    return t;
  };
  const parser = new Parser();
  watch(parser);
  parser.end(tap);
  const failedFiles = asserts
    .get(parser)!
    .filter((r) => !r.ok && !r.todo && !r.skip)
    .map((r) => r.name);
  return { total: tally(parser), failedFiles };
}

async function runTap(backend: Backend): Promise<{ tap: string; code: number | string }> {
  const out = `${root}.tap/backend-${backend}.tap`;
  mkdirSync(`${root}.tap`, { recursive: true });
  rmSync(out, { force: true });
  const args = tee ? ['--reporter=tap'] : [...(userReporter ? [] : ['--reporter=base']), `--output-file=${out}`];
  const child = spawn(process.execPath, [tapBin, ...args, ...tapArgs], {
    cwd: root,
    env: envFor(backend),
    stdio: ['inherit', tee ? 'pipe' : 'inherit', 'inherit'],
  });
  let tap = '';
  child.stdout?.setEncoding('utf8').on('data', (d: string) => {
    process.stdout.write(d);
    tap += d;
  });
  const code = await new Promise<number | string>((resolve) => {
    child.on('error', (e) => resolve(String(e)));
    child.on('close', (status, signal) => resolve(signal ?? status ?? 1));
  });
  if (tee)
    writeFileSync(out, tap); // kept for inspection, as --output-file would
  else if (existsSync(out)) tap = readFileSync(out, 'utf8');
  return { tap, code };
}

const sum: Tally = { pass: 0, fail: 0, skip: 0 };
const lines: string[] = [];
for (const backend of BACKENDS.filter((b) => !only || b === only)) {
  console.log(`\n=== tap run: TEST_BACKEND=${backend}, node ${process.version} ===\n`);
  const { tap, code } = await runTap(backend);
  const { total, failedFiles } = tallyTap(tap);
  // tap failed without a failing assertion: the runner crashed, no test files matched, ...
  if (code !== 0 && total.fail === 0) total.fail = 1;
  sum.pass += total.pass;
  sum.fail += total.fail;
  sum.skip += total.skip;
  lines.push(`[${backend}] passed ${total.pass}, failed ${total.fail}, skipped ${total.skip}; tap exit ${code}`);
  for (const f of failedFiles) lines.push(`[${backend}]   failed: ${f}`);
}
console.log(`\n${lines.join('\n')}`);
console.log(`${sum.pass} passed, ${sum.fail} failed, ${sum.skip} skipped`);
process.exit(sum.fail > 0 ? 1 : 0);
