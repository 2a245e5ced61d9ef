import { contactBody } from '../contacts/fixtures.js';
import { type Family, type HostileCase, rng, toJson } from './common.js';

/** An HTTP/1.1 request as bytes. */
function request(head: string, body: string | Buffer = ''): Buffer {
  return Buffer.concat([Buffer.from(head.replace(/\n/g, '\r\n'), 'latin1'), typeof body === 'string' ? Buffer.from(body, 'latin1') : body]);
}

/** Bytes Node's HTTP parser must judge: framing, request lines and headers no client library would send. */
export const rawHttp: Family = {
  name: 'raw http',
  about:
    'real sockets: unknown verbs, broken chunked encoding, Transfer-Encoding garbage, Content-Length mismatch, invalid UTF-8 and control bytes, header and URL overflow (431), seeded byte mutations of valid requests',
  cases(s, seed) {
    const auth = `Authorization: Bearer ${s.accessToken}\n`;
    const json = toJson(contactBody());
    const curated: [string, Buffer][] = [
      ['unknown verb FOO', request('FOO /api/contacts/ HTTP/1.1\nHost: x\nConnection: close\n\n')],
      ['lowercase verb get', request('get /api/contacts/ HTTP/1.1\nHost: x\nConnection: close\n\n')],
      ['verb with digits', request('G3T /healthz HTTP/1.1\nHost: x\nConnection: close\n\n')],
      ['CONNECT', request('CONNECT example.com:443 HTTP/1.1\nHost: example.com:443\nConnection: close\n\n')],
      [
        'broken chunk size',
        request(
          `POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nTransfer-Encoding: chunked\nConnection: close\n\nzz\n{}\n0\n\n`,
        ),
      ],
      [
        'chunk longer than declared',
        request(
          `POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nTransfer-Encoding: chunked\nConnection: close\n\n1\n{}\n0\n\n`,
        ),
      ],
      [
        'chunked without terminator',
        request(
          `POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nTransfer-Encoding: chunked\nConnection: close\n\n2\n{}\n`,
        ),
      ],
      [
        'chunk size overflow',
        request(
          `POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nTransfer-Encoding: chunked\nConnection: close\n\nffffffffffffffffff\n{}\n0\n\n`,
        ),
      ],
      [
        'chunk extension garbage',
        request(
          `POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nTransfer-Encoding: chunked\nConnection: close\n\n2;;;===\n{}\n0\n\n`,
        ),
      ],
      [
        'Transfer-Encoding gzip, garbage',
        request(
          `POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nTransfer-Encoding: gzip, garbage\nConnection: close\n\n{}`,
        ),
      ],
      [
        'Transfer-Encoding identity',
        request(
          `POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nTransfer-Encoding: identity\nContent-Length: 2\nConnection: close\n\n{}`,
        ),
      ],
      [
        'Content-Length and Transfer-Encoding',
        request(
          `POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nContent-Length: 2\nTransfer-Encoding: chunked\nConnection: close\n\n2\n{}\n0\n\n`,
        ),
      ],
      [
        'two Content-Lengths',
        request(
          `POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nContent-Length: 2\nContent-Length: 3\nConnection: close\n\n{}`,
        ),
      ],
      [
        'Content-Length abc',
        request(
          `POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nContent-Length: abc\nConnection: close\n\n{}`,
        ),
      ],
      [
        'Content-Length -1',
        request(
          `POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nContent-Length: -1\nConnection: close\n\n{}`,
        ),
      ],
      [
        'Content-Length larger than body',
        request(
          `POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nContent-Length: 100\nConnection: close\n\n{}`,
        ),
      ],
      [
        'Content-Length smaller than body',
        request(
          `POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nContent-Length: ${json.length - 5}\nConnection: close\n\n${json}`,
        ),
      ],
      [
        'header of 20 KB (431)',
        request(`GET /api/contacts/ HTTP/1.1\nHost: x\n${auth}X-Big: ${'a'.repeat(20_000)}\nConnection: close\n\n`),
      ],
      ['URL of 20 KB (431)', request(`GET /api/contacts/?query=${'a'.repeat(20_000)} HTTP/1.1\nHost: x\n${auth}Connection: close\n\n`)],
      [
        '2000 headers',
        request(
          `GET /api/contacts/ HTTP/1.1\nHost: x\n${auth}${Array.from({ length: 2000 }, (_, i) => `X-H${i}: v\n`).join('')}Connection: close\n\n`,
        ),
      ],
      ['control byte in header value', request(`GET /api/contacts/ HTTP/1.1\nHost: x\n${auth}X-Bad: a\u0001b\nConnection: close\n\n`)],
      ['NUL in header value', request(`GET /api/contacts/ HTTP/1.1\nHost: x\n${auth}X-Bad: a\u0000b\nConnection: close\n\n`)],
      ['space before colon', request(`GET /api/contacts/ HTTP/1.1\nHost: x\n${auth}X-Bad : v\nConnection: close\n\n`)],
      ['obsolete line folding', request(`GET /api/contacts/ HTTP/1.1\nHost: x\n${auth}X-Folded: a\n b\nConnection: close\n\n`)],
      ['header without colon', request(`GET /api/contacts/ HTTP/1.1\nHost: x\n${auth}NoColon\nConnection: close\n\n`)],
      ['bare LF line endings', Buffer.from(`GET /healthz HTTP/1.1\nHost: x\nConnection: close\n\n`)],
      ['bare CR line endings', Buffer.from(`GET /healthz HTTP/1.1\rHost: x\rConnection: close\r\r`)],
      ['no Host', request('GET /healthz HTTP/1.1\nConnection: close\n\n')],
      ['two Hosts', request('GET /healthz HTTP/1.1\nHost: a\nHost: b\nConnection: close\n\n')],
      ['HTTP/1.0 without Host', request('GET /healthz HTTP/1.0\n\n')],
      ['HTTP/2.0 in request line', request('GET /healthz HTTP/2.0\nHost: x\nConnection: close\n\n')],
      ['HTTP/9.9', request('GET /healthz HTTP/9.9\nHost: x\nConnection: close\n\n')],
      ['HTTP/0.9 style', request('GET /healthz\n\n')],
      ['garbage line', request('GARBAGE\n\n')],
      ['empty request', request('\n\n')],
      ['TLS ClientHello bytes', Buffer.from([0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0x00, 0x00, 0xa1, 0x03, 0x03])],
      ['HTTP/2 preface', Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n')],
      [
        'raw 0xff in URL',
        Buffer.concat([
          Buffer.from('GET /api/contacts/?query='),
          Buffer.from([0xff, 0xfe]),
          request(` HTTP/1.1\nHost: x\n${auth}Connection: close\n\n`),
        ]),
      ],
      [
        'raw UTF-8 in URL',
        Buffer.concat([
          Buffer.from('GET /api/contacts/?query='),
          Buffer.from('\u00e9', 'utf8'),
          request(` HTTP/1.1\nHost: x\n${auth}Connection: close\n\n`),
        ]),
      ],
      ['space in URL', request(`GET /api/con tacts/ HTTP/1.1\nHost: x\n${auth}Connection: close\n\n`)],
      ['absolute-form URL', request(`GET http://evil.example/api/contacts/ HTTP/1.1\nHost: x\n${auth}Connection: close\n\n`)],
      ['asterisk-form GET', request('GET * HTTP/1.1\nHost: x\nConnection: close\n\n')],
      ['percent garbage in path', request(`GET /api/contacts/%%%/ HTTP/1.1\nHost: x\n${auth}Connection: close\n\n`)],
      [
        'invalid UTF-8 in JSON body',
        (() => {
          const body = Buffer.concat([
            Buffer.from('{"first_name":"'),
            Buffer.from([0xff, 0xc0, 0x80, 0xed, 0xa0, 0x80]),
            Buffer.from('"}'),
          ]);
          return request(
            `POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nContent-Length: ${body.length}\nConnection: close\n\n`,
            body,
          );
        })(),
      ],
      [
        'multipart cut short',
        (() => {
          const body = '--XyZ\r\nContent-Disposition: form-data; name="username"\r\n\r\nann';
          return request(
            `POST /api/auth/login HTTP/1.1\nHost: x\nContent-Type: multipart/form-data; boundary=XyZ\nContent-Length: ${body.length}\nConnection: close\n\n`,
            body,
          );
        })(),
      ],
      [
        'Expect 100-continue then nothing',
        request(
          `POST /api/auth/register HTTP/1.1\nHost: x\nContent-Type: application/json\nExpect: 100-continue\nContent-Length: 50\nConnection: close\n\n`,
        ),
      ],
      [
        'Expect junk',
        request(
          `POST /api/auth/register HTTP/1.1\nHost: x\nContent-Type: application/json\nExpect: 100-banana\nContent-Length: 2\nConnection: close\n\n{}`,
        ),
      ],
      ['Upgrade websocket', request(`GET /api/contacts/ HTTP/1.1\nHost: x\n${auth}Upgrade: websocket\nConnection: Upgrade\n\n`)],
      [
        'Authorization 20 KB',
        request(`GET /api/contacts/ HTTP/1.1\nHost: x\nAuthorization: Bearer ${'a'.repeat(20_000)}\nConnection: close\n\n`),
      ],
      ['two Authorization headers', request(`GET /api/contacts/ HTTP/1.1\nHost: x\n${auth}Authorization: Bearer x\nConnection: close\n\n`)],
      [
        'two Content-Types',
        request(
          `POST /api/auth/register HTTP/1.1\nHost: x\nContent-Type: application/json\nContent-Type: text/plain\nContent-Length: 2\nConnection: close\n\n{}`,
        ),
      ],
    ];
    const cases: HostileCase[] = curated.map(([label, bytes]) => ({ label, ...describeRaw(bytes), raw: bytes }));

    // Seeded byte mutations of valid requests: flips, insertions of parser-significant bytes, deletions.
    const r = rng(seed);
    const bases = [
      request(`GET /api/contacts/?skip=0&limit=5 HTTP/1.1\nHost: x\n${auth}Connection: close\n\n`),
      request(
        `POST /api/contacts/ HTTP/1.1\nHost: x\n${auth}Content-Type: application/json\nContent-Length: ${json.length}\nConnection: close\n\n`,
        json,
      ),
      request(
        `POST /api/auth/login HTTP/1.1\nHost: x\nContent-Type: application/x-www-form-urlencoded\nContent-Length: 31\nConnection: close\n\nusername=someone&password=wrong`,
      ),
      request(
        `POST /api/auth/refresh HTTP/1.1\nHost: x\nContent-Type: application/json\nTransfer-Encoding: chunked\nConnection: close\n\n12\n{"refresh_token":1\n1\n}\n0\n\n`,
      ),
    ];
    const special = [0x00, 0x0a, 0x0d, 0x20, 0x22, 0x25, 0x2c, 0x3a, 0x3b, 0x7f, 0x80, 0xc0, 0xed, 0xff];
    for (let i = 0; i < 160; i++) {
      const base = Buffer.from(r.pick(bases));
      // Most mutations hit the head, where the parser decides; some hit the body.
      const headEnd = base.indexOf('\r\n\r\n');
      const at = r.int(0, r.int(0, 3) === 0 ? base.length - 1 : headEnd);
      const kind = r.pick(['flip', 'insert', 'delete', 'truncate'] as const);
      let mutated: Buffer;
      if (kind === 'flip') {
        mutated = Buffer.from(base);
        mutated[at] = r.pick(special);
      } else if (kind === 'insert') {
        mutated = Buffer.concat([base.subarray(0, at), Buffer.from([r.pick(special)]), base.subarray(at)]);
      } else if (kind === 'delete') {
        mutated = Buffer.concat([base.subarray(0, at), base.subarray(at + 1)]);
      } else {
        mutated = base.subarray(0, at);
      }
      cases.push({ label: `mutation #${i}: ${kind} at ${at}`, ...describeRaw(mutated), raw: mutated });
    }
    return cases;
  },
};

/** Method and target of raw bytes, for reports. */
function describeRaw(bytes: Buffer): { method: string; url: string } {
  const line =
    bytes
      .subarray(0, Math.min(bytes.length, 200))
      .toString('latin1')
      .split(/\r?\n|\r/, 1)[0] ?? '';
  const [method = '?', url = '?'] = line.split(' ');
  return { method: method.replace(/[^\x21-\x7e]/g, '?'), url: url.replace(/[^\x21-\x7e]/g, '?').slice(0, 120) };
}
