/**
 * Tracing against the real process (src/server.ts) and an OTLP/HTTP receiver inside this test:
 * a cache-missing `GET /api/contacts/{contact_id}` sent with a W3C `traceparent` gives a SERVER
 * span named by its route template that continues the caller's trace, a child span per SQL
 * statement that holds no parameter value, Redis spans with a command's keys but no value, and the
 * request's log lines carry the trace and span ids. The postgres run exports in the default
 * protocol (http/protobuf, decoded here), the embedded run in http/json, so each run checks one.
 */
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createServer } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import t, { type Test } from 'tap';
import { backend, smtpCapture, testEnv } from '../helper.js';
import { signUp, startService } from '../faults/processes.js';

interface ExportedSpan {
  name: string;
  kind: number;
  traceId: string;
  spanId: string;
  parentSpanId: string;
  attributes: Record<string, string | number | boolean>;
  resource: Record<string, string | number | boolean>;
}

const SPAN_KIND_SERVER = 2;
const SPAN_KIND_CLIENT = 3;

type Fields = Map<number, (bigint | Buffer)[]>;

/** The fields of one protobuf message (wire types 0, 1, 2 and 5), each with its values in order. */
function decodeMessage(bytes: Buffer): Fields {
  const fields: Fields = new Map();
  let at = 0;
  const varint = () => {
    let value = 0n;
    for (let shift = 0n; ; shift += 7n) {
      const byte = bytes[at++]!;
      value |= BigInt(byte & 0x7f) << shift;
      if (byte < 0x80) return value;
    }
  };
  while (at < bytes.length) {
    const key = Number(varint());
    const [field, wireType] = [key >>> 3, key & 7];
    let value: bigint | Buffer;
    if (wireType === 0) value = varint();
    else if (wireType === 2) {
      const length = Number(varint());
      value = bytes.subarray(at, at + length);
      at += length;
    } else {
      const size = wireType === 1 ? 8 : 4;
      value = bytes.subarray(at, at + size);
      at += size;
    }
    fields.set(field, [...(fields.get(field) ?? []), value]);
  }
  return fields;
}

const bytesOf = (fields: Fields, field: number) => (fields.get(field) ?? []) as Buffer[];
const textOf = (fields: Fields, field: number) => bytesOf(fields, field)[0]?.toString('utf8') ?? '';

/** OTLP KeyValue list (protobuf): string, bool, int and double values. */
function protobufAttributes(keyValues: Buffer[]): ExportedSpan['attributes'] {
  const attributes: ExportedSpan['attributes'] = {};
  for (const keyValue of keyValues) {
    const fields = decodeMessage(keyValue);
    const value = decodeMessage(bytesOf(fields, 2)[0] ?? Buffer.alloc(0));
    if (value.has(1)) attributes[textOf(fields, 1)] = textOf(value, 1);
    else if (value.has(2)) attributes[textOf(fields, 1)] = value.get(2)![0] === 1n;
    else if (value.has(3)) attributes[textOf(fields, 1)] = Number(value.get(3)![0]);
    else if (value.has(4)) attributes[textOf(fields, 1)] = (value.get(4)![0] as Buffer).readDoubleLE(0);
  }
  return attributes;
}

/** ExportTraceServiceRequest (opentelemetry-proto, trace/v1) → its spans. */
function protobufSpans(body: Buffer): ExportedSpan[] {
  const spans: ExportedSpan[] = [];
  for (const resourceSpans of bytesOf(decodeMessage(body), 1)) {
    const fields = decodeMessage(resourceSpans);
    const resource = protobufAttributes(bytesOf(decodeMessage(bytesOf(fields, 1)[0] ?? Buffer.alloc(0)), 1));
    for (const scopeSpans of bytesOf(fields, 2)) {
      for (const span of bytesOf(decodeMessage(scopeSpans), 2).map(decodeMessage)) {
        spans.push({
          name: textOf(span, 5),
          kind: Number(span.get(6)?.[0] ?? 0),
          traceId: bytesOf(span, 1)[0]?.toString('hex') ?? '',
          spanId: bytesOf(span, 2)[0]?.toString('hex') ?? '',
          parentSpanId: bytesOf(span, 4)[0]?.toString('hex') ?? '',
          attributes: protobufAttributes(bytesOf(span, 9)),
          resource,
        });
      }
    }
  }
  return spans;
}

interface JsonKeyValue {
  key: string;
  value: { stringValue?: string; intValue?: string | number; boolValue?: boolean; doubleValue?: number };
}

function jsonAttributes(keyValues: JsonKeyValue[] = []): ExportedSpan['attributes'] {
  return Object.fromEntries(
    keyValues.map(({ key, value }) => [key, value.stringValue ?? value.boolValue ?? Number(value.intValue ?? value.doubleValue)]),
  );
}

/** The OTLP JSON encoding of the same request: ids in hex. */
function jsonSpans(body: Buffer): ExportedSpan[] {
  type Request = {
    resourceSpans: {
      resource?: { attributes?: JsonKeyValue[] };
      scopeSpans: {
        spans: { name: string; kind: number; traceId: string; spanId: string; parentSpanId?: string; attributes?: JsonKeyValue[] }[];
      }[];
    }[];
  };
  const request = JSON.parse(body.toString('utf8')) as Request;
  return request.resourceSpans.flatMap((resourceSpans) =>
    resourceSpans.scopeSpans.flatMap((scopeSpans) =>
      scopeSpans.spans.map((span) => ({
        name: span.name,
        kind: span.kind,
        traceId: span.traceId,
        spanId: span.spanId,
        parentSpanId: span.parentSpanId ?? '',
        attributes: jsonAttributes(span.attributes),
        resource: jsonAttributes(resourceSpans.resource?.attributes),
      })),
    ),
  );
}

/** An OTLP/HTTP receiver on a free port, decoding what it gets in `protocol`. */
async function otlpReceiver(t: Test, protocol: 'http/json' | 'http/protobuf') {
  const spans: ExportedSpan[] = [];
  const exports: { path: string; contentType: string }[] = [];
  const receiver = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const body = Buffer.concat(chunks);
      exports.push({ path: request.url ?? '', contentType: request.headers['content-type'] ?? '' });
      spans.push(...(protocol === 'http/json' ? jsonSpans(body) : protobufSpans(body)));
      response
        .writeHead(200, { 'content-type': request.headers['content-type'] ?? 'application/json' })
        .end(protocol === 'http/json' ? '{}' : '');
    });
  });
  receiver.listen(0, '127.0.0.1');
  await once(receiver, 'listening');
  t.teardown(() => receiver.close());
  const { port } = receiver.address() as { port: number };
  return { spans, exports, endpoint: `http://127.0.0.1:${port}` };
}

/** The proxy the services below trust (TRUST_PROXY=loopback) passing a request on: a client's traceparent counts only then. */
const THROUGH_PROXY = { 'x-forwarded-for': '203.0.113.7' };

t.test('a cache-missing read by id is one server span continuing the caller, with SQL and Redis spans inside', async (t) => {
  const protocol = backend === 'postgres' ? 'http/protobuf' : 'http/json';
  const { spans, exports, endpoint } = await otlpReceiver(t, protocol);

  const mailbox = await smtpCapture(t);
  const env = {
    ...(await testEnv(t)),
    SMTP_URL: mailbox.url,
    LOG_LEVEL: 'info',
    OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
    OTEL_BSP_SCHEDULE_DELAY: '50',
    TRUST_PROXY: 'loopback',
    ...(protocol === 'http/json' && { OTEL_EXPORTER_OTLP_PROTOCOL: protocol }),
  };
  const service = await startService(t, env);
  const token = await signUp(service.url, mailbox, 'tracer');
  const auth = { authorization: `Bearer ${token}` };
  const email = 'traced.person@example.com';
  // A request with a body: its statements run after the body is parsed, from the stream's events.
  const createTraceId = randomBytes(16).toString('hex');
  const created = await fetch(`${service.url}/api/contacts/`, {
    method: 'POST',
    headers: {
      ...auth,
      ...THROUGH_PROXY,
      'content-type': 'application/json',
      traceparent: `00-${createTraceId}-${randomBytes(8).toString('hex')}-01`,
    },
    body: JSON.stringify({ first_name: 'Traced', last_name: 'Person', email, phone: '+14155550123', birthday: '1990-04-01' }),
  });
  t.equal(created.status, 201);
  const { id } = (await created.json()) as { id: number };

  const traceId = randomBytes(16).toString('hex');
  const callerSpanId = randomBytes(8).toString('hex');
  const requestId = `trace-test:${randomBytes(4).toString('hex')}`;
  const read = await fetch(`${service.url}/api/contacts/${id}`, {
    headers: { ...auth, ...THROUGH_PROXY, traceparent: `00-${traceId}-${callerSpanId}-01`, 'x-request-id': requestId },
  });
  t.equal(read.status, 200);
  t.equal(read.headers.get('x-cache'), 'MISS', 'the read missed the cache, so it went to the database');
  t.equal(read.headers.get('x-request-id'), requestId, 'a well-formed X-Request-Id is kept');

  const serverSpanOf = () => spans.find((span) => span.traceId === traceId && span.kind === SPAN_KIND_SERVER);
  for (let waited = 0; !serverSpanOf() && waited < 10_000; waited += 50) await sleep(50);
  const server = serverSpanOf();
  if (!server) throw new Error(`no server span of trace ${traceId} arrived; ${spans.length} spans in ${exports.length} exports`);
  // Children end before their parent, so they are exported with it or earlier.
  const children = spans.filter((span) => span.traceId === traceId && span.parentSpanId === server.spanId);

  const contentType = protocol === 'http/json' ? 'application/json' : 'application/x-protobuf';
  t.same(exports[0], { path: '/v1/traces', contentType }, `spans are sent as ${protocol}`);
  t.equal(server.resource['service.name'], 'contacts-service', 'the resource names the service');
  t.equal(server.name, 'GET /api/contacts/{contact_id}', 'the server span is named by its method and route template');
  t.equal(server.parentSpanId, callerSpanId, "the caller's traceparent is continued");
  t.match(server.attributes, {
    'http.request.method': 'GET',
    'http.route': '/api/contacts/{contact_id}',
    'http.response.status_code': 200,
  });

  const sql = children.filter((span) => span.attributes['db.system.name'] === 'postgresql');
  t.ok(sql.length > 0, `SQL statements are child spans (${sql.map((span) => span.name).join(', ')})`);
  t.ok(
    sql.every((span) => span.kind === SPAN_KIND_CLIENT),
    'SQL spans are CLIENT spans',
  );
  const statements = sql.map((span) => String(span.attributes['db.query.text']));
  const readsContact = (text: string) => /\bfrom "?contacts"?/i.test(text) && /\$1\b/.test(text);
  t.ok(statements.some(readsContact), `the contact is read with its values as placeholders: ${statements.join(' | ')}`);
  for (const text of statements) {
    t.notMatch(text, new RegExp(`(=|in \\()\\s*'?${id}\\b|${email}|Traced`, 'i'), `no parameter value in: ${text}`);
  }

  const redis = children.filter((span) => span.attributes['db.system.name'] === 'redis');
  if (backend === 'postgres') {
    t.ok(redis.length > 0, `Redis commands are child spans (${redis.map((span) => span.name).join(', ')})`);
    for (const span of redis) {
      const text = String(span.attributes['db.query.text']);
      t.equal(text.split(' ')[0], span.name, `${span.name}: the text starts with the command`);
      // The cached answer (SET's value) holds the contact; the read script's arguments hold the URL (its keys do not).
      const values = [email, 'Traced', ...(span.name.startsWith('EVAL') ? [`/api/contacts/${id}`] : [])];
      t.notMatch(text, new RegExp(values.join('|')), `${span.name}: no value in: ${text}`);
    }
  } else {
    t.same(redis, [], 'the embedded backend has no Redis');
  }

  const createSpan = spans.find((span) => span.traceId === createTraceId && span.kind === SPAN_KIND_SERVER);
  const insert = spans.find((span) => span.traceId === createTraceId && span.name === 'INSERT');
  t.equal(createSpan?.name, 'POST /api/contacts/', 'the create is a server span of its own trace');
  t.equal(insert?.parentSpanId, createSpan?.spanId, "the create's INSERT, run after its body was parsed, is a child of its span");

  const lines = service.logs.filter((line) => line.reqId === requestId);
  const traced = lines.filter((line) => line.trace_id !== undefined);
  t.ok(traced.length > 0, `log lines of the request carry the trace (${traced.map((line) => line.msg).join(', ')})`);
  t.ok(
    traced.every((line) => line.trace_id === traceId && typeof line.span_id === 'string'),
    'with its trace_id and a span_id',
  );
});

t.test("a client's own sampled traceparent neither forces tracing nor names the trace; a trusted proxy's does", async (t) => {
  const protocol = backend === 'postgres' ? 'http/protobuf' : 'http/json';
  const { spans, endpoint } = await otlpReceiver(t, protocol);
  const env = {
    ...(await testEnv(t)),
    OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
    OTEL_BSP_SCHEDULE_DELAY: '50',
    TRUST_PROXY: 'loopback',
    // No request is sampled unless a parent says so.
    OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
    OTEL_TRACES_SAMPLER_ARG: '0',
    ...(protocol === 'http/json' && { OTEL_EXPORTER_OTLP_PROTOCOL: protocol }),
  };
  const service = await startService(t, env);
  const traceparent = () => {
    const traceId = randomBytes(16).toString('hex');
    return { traceId, spanId: randomBytes(8).toString('hex'), header: (id: string, span: string) => `00-${id}-${span}-01` };
  };
  const direct = traceparent();
  // Sent straight from a client (the socket's address is trusted, but nothing was forwarded), then through the proxy.
  const first = await fetch(`${service.url}/healthz`, { headers: { traceparent: direct.header(direct.traceId, direct.spanId) } });
  t.equal(first.status, 200);
  const proxied = traceparent();
  const second = await fetch(`${service.url}/healthz`, {
    headers: { ...THROUGH_PROXY, traceparent: proxied.header(proxied.traceId, proxied.spanId) },
  });
  t.equal(second.status, 200);
  // Spans are exported in the order they end, so once the second request's has come, the first's would have.
  const proxiedSpan = () => spans.find((span) => span.traceId === proxied.traceId && span.kind === SPAN_KIND_SERVER);
  for (let waited = 0; !proxiedSpan() && waited < 10_000; waited += 50) await sleep(50);
  t.equal(proxiedSpan()?.parentSpanId, proxied.spanId, "the trusted proxy's traceparent is continued");
  t.same(
    spans.filter((span) => span.traceId !== proxied.traceId),
    [],
    "the client's own sampled traceparent was not followed: at ratio 0 nothing else was traced",
  );
});
