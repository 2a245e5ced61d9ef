/**
 * Hostile input: thousands of generated malformed requests (test/hostile-input/generators.ts, seeded)
 * against every operation of openapi.yaml, over app.inject and, for bytes inject cannot express,
 * over real sockets. The contract: never a 5xx, and every error body is exactly `{"detail": "<string>"}`.
 * One assertion per family lists every request that broke it, grouped by answer; departures from
 * openapi.yaml (undocumented statuses, say) are collected apart and asserted last.
 *
 * The app runs as deployed behind a load balancer with a browser client: TRUST_PROXY and
 * CORS_ORIGINS set, so forwarding headers and CORS preflights are exercised too.
 */
import net from 'node:net';
import t from 'tap';
import { loggedInUser } from '../auth/accounts.js';
import { contactBody, createUser } from '../contacts/fixtures.js';
import { build } from '../helper.js';
import { FAMILIES, type HostileCase, type Subjects } from './generators.js';

const SEED = Number(process.env.HOSTILE_SEED ?? 20261122);
const MIN_REQUESTS = 2000;
const CONCURRENCY = 8;
const SOCKET_TIMEOUT_MS = 4000;
// Long enough for a loaded machine to answer a complete request before the half-close.
const IDLE_MS = 1000;

const specProblems: string[] = [];
const app = await build(
  // The spec check's reports are collected, so they are asserted apart from the contract breaches.
  // An absolute-form target (`GET http://host/api/...`) is skipped: spec-validator.ts matches on
  // request.url, which keeps the scheme and host there, and reports a mismatch that is not the service's.
  {
    teardown: (fn) => t.teardown(fn),
    fail: (problem) => void (/^response departs from openapi\.yaml: \S+ https?:\/\//.test(problem) || specProblems.push(problem)),
  },
  {
    env: {
      RATE_LIMIT_ANON_PER_MIN: '1000000',
      RATE_LIMIT_ME_PER_MIN: '1000000',
      TRUST_PROXY: 'true',
      CORS_ORIGINS: 'http://app.test',
    },
  },
);
await app.listen({ host: '127.0.0.1', port: 0 });
const { port } = app.server.address() as net.AddressInfo;

const session = await loggedInUser(app);
const other = await createUser(app);
const createAs = async (token: string) => {
  const res = await app.inject({
    method: 'POST',
    url: '/api/contacts/',
    headers: { authorization: `Bearer ${token}` },
    payload: contactBody(),
  });
  if (res.statusCode !== 201) throw new Error(`create failed: ${res.statusCode} ${res.body}`);
  return res.json<{ id: number }>().id;
};
const subjects: Subjects = {
  userId: session.id,
  username: session.username,
  email: session.email,
  password: session.password,
  accessToken: session.accessToken,
  refreshToken: session.refreshToken,
  contactId: await createAs(session.accessToken),
  spareContactId: await createAs(session.accessToken),
  otherUserId: other.id,
  otherContactId: await createAs(other.token),
};

interface Answer {
  /** null: the connection closed (or timed out) without a response. */
  status: number | null;
  contentType: string;
  body: string;
}

async function send(c: HostileCase): Promise<Answer> {
  if (c.raw) return sendRaw(c.raw);
  const res = await app.inject({
    method: c.method as 'GET',
    url: c.url,
    headers: c.headers ?? {},
    ...(c.payload === undefined ? {} : { payload: c.payload }),
  });
  return { status: res.statusCode, contentType: String(res.headers['content-type'] ?? ''), body: res.body };
}

/**
 * Writes the bytes and reads the first final response. A request the server is still waiting on
 * (a body shorter than announced, say) gets a half-close after IDLE_MS, so the parser sees the end
 * of input; half-closing at once would let Node abort requests whose hooks are still awaiting I/O.
 */
function sendRaw(bytes: Buffer): Promise<Answer> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    let settled = false;
    const finish = () => {
      if (settled) return;
      settled = true;
      clearTimeout(idle);
      clearTimeout(timer);
      socket.destroy();
      resolve(parseResponse(Buffer.concat(chunks)) ?? { status: null, contentType: '', body: '' });
    };
    const idle = setTimeout(() => socket.end(), IDLE_MS);
    const timer = setTimeout(finish, SOCKET_TIMEOUT_MS);
    socket.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      if (parseResponse(Buffer.concat(chunks), false)) finish();
    });
    socket.on('error', finish);
    socket.on('close', finish);
    socket.write(bytes);
  });
}

/**
 * The first final (non-1xx) response in `bytes`, chunked bodies decoded; null while it is incomplete.
 * With `closed`, the connection has ended and whatever arrived is the response.
 */
function parseResponse(bytes: Buffer, closed = true): Answer | null {
  let rest = bytes;
  for (;;) {
    const headEnd = rest.indexOf('\r\n\r\n');
    if (headEnd === -1) return closed && rest.length > 0 ? { status: null, contentType: '', body: rest.toString('latin1') } : null;
    const [statusLine = '', ...lines] = rest.subarray(0, headEnd).toString('latin1').split('\r\n');
    const status = Number(/^HTTP\/\d\.\d (\d{3})/.exec(statusLine)?.[1] ?? NaN);
    const headers = new Map(
      lines.map((line) => [line.slice(0, line.indexOf(':')).trim().toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]),
    );
    const body = rest.subarray(headEnd + 4);
    if (status >= 100 && status < 200) {
      rest = body;
      continue;
    }
    const answer = (content: Buffer): Answer => ({
      status: Number.isNaN(status) ? null : status,
      contentType: headers.get('content-type') ?? '',
      body: content.toString('utf8'),
    });
    if (/chunked/i.test(headers.get('transfer-encoding') ?? '')) {
      if (!closed && body.indexOf('0\r\n\r\n') === -1) return null;
      return answer(dechunk(body));
    }
    if (headers.has('content-length')) {
      const length = Number(headers.get('content-length'));
      if (!closed && body.length < length) return null;
      return answer(body.subarray(0, length));
    }
    return closed ? answer(body) : null;
  }
}

function dechunk(data: Buffer): Buffer {
  const out: Buffer[] = [];
  let at = 0;
  for (;;) {
    const lineEnd = data.indexOf('\r\n', at);
    if (lineEnd === -1) break;
    const size = parseInt(data.subarray(at, lineEnd).toString('latin1'), 16);
    if (!(size > 0)) break;
    out.push(data.subarray(lineEnd + 2, lineEnd + 2 + size));
    at = lineEnd + 2 + size + 2;
  }
  return Buffer.concat(out);
}

/** How the answer breaks the contract, or null. */
function breach(c: HostileCase, answer: Answer): string | null {
  const { status } = answer;
  if (status === null) return null;
  if (status >= 500) return 'server error';
  if (c.expect && !c.expect.includes(status)) return `expected ${c.expect.join(' or ')}`;
  if (status < 400 || answer.body === '') return null;
  if (!/^application\/json\b/i.test(answer.contentType)) return `error body is ${answer.contentType || 'untyped'}, not JSON`;
  let parsed: unknown;
  try {
    parsed = JSON.parse(answer.body);
  } catch {
    return 'error body is not valid JSON';
  }
  const isDetail =
    typeof parsed === 'object' &&
    parsed !== null &&
    !Array.isArray(parsed) &&
    Object.keys(parsed).join() === 'detail' &&
    typeof (parsed as { detail: unknown }).detail === 'string';
  if (!isDetail) return 'error body is not exactly {"detail": "<string>"}';
  if (/\bat .+:\d+:\d+|node_modules|\bstack\b/i.test(answer.body)) return 'detail leaks internals';
  return null;
}

const clip = (text: string, max: number) => (text.length > max ? `${text.slice(0, max)}…` : text);

/** Runs cases CONCURRENCY at a time; answers in case order. */
async function runAll(cases: readonly HostileCase[]): Promise<Answer[]> {
  const answers: Answer[] = new Array(cases.length);
  let next = 0;
  const worker = async () => {
    while (next < cases.length) {
      const i = next++;
      answers[i] = await send(cases[i]!);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  return answers;
}

/**
 * Breaches grouped by what broke and what came back, largest group first, each with up to
 * `examples` requests (`METHOD url [label]`): a failing family reads as a list of distinct bugs.
 */
function groupBreaches(found: { c: HostileCase; answer: Answer; why: string }[], examples = 10): string[] {
  const groups = new Map<string, typeof found>();
  for (const item of found) {
    const { status, body } = item.answer;
    // Success bodies differ in ids and dates; the status says enough there.
    const key = `${item.why}: ${status} ${status !== null && status >= 400 ? clip(body, 160) : '(success)'}`;
    groups.set(key, [...(groups.get(key) ?? []), item]);
  }
  return [...groups.entries()]
    .sort((a, b) => b[1].length - a[1].length)
    .map(([key, items]) => {
      const shown = items.slice(0, examples).map(({ c }) => `    ${c.method} ${clip(c.url, 100)} [${clip(c.label, 90)}]`);
      const more = items.length > examples ? [`    … and ${items.length - examples} more`] : [];
      return [`${items.length} × ${key}`, ...shown, ...more].join('\n');
    });
}

let sent = 0;
for (const family of FAMILIES) {
  t.test(family.name, async (t) => {
    const cases = family.cases(subjects, SEED);
    const started = Date.now();
    const answers = await runAll(cases);
    sent += cases.length;
    const found = cases.flatMap((c, i) => {
      const why = breach(c, answers[i]!);
      return why ? [{ c, answer: answers[i]!, why }] : [];
    });
    const silent = answers.filter((a) => a.status === null).length;
    t.comment(
      `${family.name}: ${cases.length} requests (${family.about}) in ${Date.now() - started} ms${silent ? `; ${silent} closed without an answer` : ''}`,
    );
    const groups = groupBreaches(found);
    t.equal(
      found.length,
      0,
      `${family.name}: ${found.length} of ${cases.length} requests broke the contract, ${groups.length} distinct answers`,
      {
        breaches: groups,
      },
    );
  });
}

t.test('requests sent', async (t) => {
  t.ok(sent >= MIN_REQUESTS, `${sent} hostile requests sent (at least ${MIN_REQUESTS})`);
});

t.test('every routed answer agrees with openapi.yaml', async (t) => {
  // One line per kind of departure (the URL dropped), with how often it happened and one example.
  const kinds = new Map<string, { count: number; example: string }>();
  for (const problem of specProblems) {
    const kind = problem.replace(/^response departs from openapi\.yaml: \S+ \S+ → \d+: /, '').replace(/: .{200,}$/, ': …');
    const entry = kinds.get(kind) ?? { count: 0, example: clip(problem, 300) };
    entry.count++;
    kinds.set(kind, entry);
  }
  const listed = [...kinds.entries()]
    .sort((a, b) => b[1].count - a[1].count)
    .map(([kind, { count, example }]) => `${count} × ${kind}\n    e.g. ${example}`);
  t.equal(specProblems.length, 0, `${specProblems.length} answers depart from openapi.yaml, ${kinds.size} kinds`, { departures: listed });
});
