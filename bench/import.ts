/**
 * `npx tsx bench/import.ts [--lines 40000,80000,160000] [--blank-mib 10]`
 *
 * What hostile imports cost (issue 21). First the vCard reader alone on a card whose
 * quoted-printable NOTE goes on over `ab=` soft line breaks, `--lines` of them. Then over HTTP, in
 * this process (the embedded database in a scratch folder, the in-process cache): the same bodies
 * and a CSV of blank lines (`--blank-mib` MiB, the body limit) are imported while /healthz is asked every 20 ms,
 * and the import's time and status and the slowest /healthz answer are printed. None of the
 * bodies holds a valid contact, so the database does no work. Prints a Markdown table.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { loadConfig } from '../plugins/config.js';
import { buildApp } from '../src/app.js';
import { parseVcards } from '../src/contacts/formats/vcard.js';

const { values } = parseArgs({
  options: { lines: { type: 'string', default: '40000,80000,160000' }, 'blank-mib': { type: 'string', default: '10' } },
});
const LINES = values.lines.split(',').map(Number);
const BLANK_BYTES = Number(values['blank-mib']) * 1024 * 1024;

/** A card with a quoted-printable NOTE of `lines` soft line breaks, and no e-mail: an entry error, nothing created. */
const softBreaks = (lines: number) =>
  `BEGIN:VCARD\r\nVERSION:2.1\r\nFN:A B\r\nNOTE;ENCODING=QUOTED-PRINTABLE:${'ab=\r\n'.repeat(lines)}x\r\nEND:VCARD\r\n`;

const rows: string[] = [
  '| body | bytes | reader alone (ms) | import over HTTP (ms) | status | slowest /healthz (ms) |',
  '|---|---:|---:|---:|---:|---:|',
];

const dataDir = await mkdtemp(path.join(os.tmpdir(), 'bench-import-'));
const app = await buildApp({
  config: await loadConfig({
    NODE_ENV: 'test',
    LOG_LEVEL: 'silent',
    DATA_DIR: dataDir,
    JWT_SECRET: 'bench-secret-that-is-at-least-32-characters',
    RATE_LIMIT_ANON_PER_MIN: '1000000',
  }),
});
try {
  const base = await app.listen({ port: 0, host: '127.0.0.1' });
  const { id } = await app.db
    .insertInto('users')
    .values({ username: 'bench', email: 'bench@example.com', password_hash: 'not-a-hash', is_verified: true })
    .returning('id')
    .executeTakeFirstOrThrow();
  const token = app.tokens.sign(id, 'access', 3600);

  /** Imports `body` while /healthz is polled; the import's time and status and the slowest poll. */
  async function imported(body: string, type: string): Promise<{ ms: number; status: number; slowest: number }> {
    let slowest = 0;
    let done = false;
    const polling = (async () => {
      while (!done) {
        const started = performance.now();
        await fetch(`${base}/healthz`).then((res) => res.arrayBuffer());
        slowest = Math.max(slowest, performance.now() - started);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    })();
    const started = performance.now();
    const res = await fetch(`${base}/api/contacts/import`, {
      method: 'POST',
      body,
      headers: { authorization: `Bearer ${token}`, 'content-type': type },
    });
    await res.arrayBuffer();
    const ms = performance.now() - started;
    done = true;
    await polling;
    return { ms, status: res.status, slowest };
  }

  // Warm: the routes compiled, and the import worker thread started where there is one.
  await imported(softBreaks(4000), 'text/vcard');
  for (const lines of LINES) {
    const body = softBreaks(lines);
    const started = performance.now();
    parseVcards(body);
    const alone = performance.now() - started;
    const http = await imported(body, 'text/vcard');
    rows.push(
      `| vCard, ${lines} soft line breaks | ${Buffer.byteLength(body)} | ${alone.toFixed(0)} | ${http.ms.toFixed(0)} | ${http.status} | ${http.slowest.toFixed(0)} |`,
    );
    console.error(rows.at(-1));
  }
  // Just under the 10 MiB body limit.
  const header = 'first_name,last_name,email,phone,birthday\r\n';
  const blankLines = Math.floor((BLANK_BYTES - header.length) / 2);
  const blank = header + '\r\n'.repeat(blankLines);
  const http = await imported(blank, 'text/csv');
  rows.push(
    `| CSV, ${blankLines} blank lines | ${Buffer.byteLength(blank)} | | ${http.ms.toFixed(0)} | ${http.status} | ${http.slowest.toFixed(0)} |`,
  );
} finally {
  await app.close();
  await rm(dataDir, { recursive: true, force: true });
}
console.log(rows.join('\n'));
