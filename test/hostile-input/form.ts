import { describe, type Family, type HostileCase, hostileString, rng, samples } from './common.js';

function multipart(boundary: string, parts: string[], { close = true, eol = '\r\n' } = {}): string {
  return `${parts.map((part) => `--${boundary}${eol}${part}${eol}`).join('')}${close ? `--${boundary}--${eol}` : ''}`;
}
const field = (name: string, value: string, eol = '\r\n') => `Content-Disposition: form-data; name="${name}"${eol}${eol}${value}`;

/** Login form bodies, urlencoded and multipart: cut short, huge, missing fields, files, boundary garbage. */
export const forms: Family = {
  name: 'form bodies',
  about:
    'login forms urlencoded and multipart: cut short at many offsets, huge fields, file parts, missing and repeated fields, boundary garbage, invalid percent-encoding and UTF-8',
  cases(s, seed) {
    const r = rng(seed);
    const login = (label: string, payload: string | Buffer, contentType: string): HostileCase => ({
      label: `login ${label}`,
      method: 'POST',
      url: '/api/auth/login',
      headers: { 'content-type': contentType },
      payload,
    });
    const urlencoded = 'application/x-www-form-urlencoded';
    const forms: [string, string | Buffer][] = [
      ['empty', ''],
      ['=', '='],
      ['&&&', '&&&'],
      ['name only', 'username'],
      ['empty values', 'username=&password='],
      ['username only', `username=${s.username}`],
      ['password only', 'password=x'],
      ['repeated username', `username=${s.username}&username=b&password=${s.password}`],
      ['username[]', `username[]=${s.username}&password=x`],
      ['username[a]', `username[a]=${s.username}&password=x`],
      ['%5B%5D in name', `username%5B%5D=${s.username}&password=x`],
      ['%zz name', '%zz=1&username=a&password=b'],
      ['%zz value', 'username=%zz&password=x'],
      ['lone %', 'username=%&password=%'],
      ['half escape %E0%A4%A', 'username=%E0%A4%A&password=x'],
      ['CESU surrogate %ED%A0%80', 'username=%ED%A0%80&password=x'],
      ['overlong NUL %C0%80', 'username=%C0%80&password=x'],
      ['%00 in username', 'username=a%00b&password=x'],
      ['%00 in password', `username=${s.username}&password=a%00b`],
      ['%2500', 'username=%2500&password=x'],
      ['plus signs', 'username=+++&password=+++'],
      ['unknown field', `username=${s.username}&password=x&extra=1`],
      ['__proto__ field', `__proto__=x&username=${s.username}&password=x`],
      ['constructor[prototype]', `constructor[prototype][admin]=1&username=a&password=b`],
      ['hasOwnProperty field', 'hasOwnProperty=1&username=a&password=b'],
      ['semicolon separators', `username=${s.username};password=x`],
      ['1000 fields', Array.from({ length: 1000 }, (_, i) => `f${i}=${i}`).join('&')],
      ['username 255', `username=${'u'.repeat(255)}&password=x`],
      ['password 1025', `username=a&password=${'p'.repeat(1025)}`],
      ['1 MiB + 1', `username=a&password=${'p'.repeat(1024 * 1024)}`],
      ['raw latin1 é', Buffer.from('username=\u00e9&password=x', 'latin1')],
      ['raw 0xff byte', Buffer.concat([Buffer.from('username='), Buffer.from([0xff, 0xfe]), Buffer.from('&password=x')])],
      ['real credentials then garbage', `username=${s.username}&password=${s.password}&&&=&%`],
      ['email with NUL', `username=${encodeURIComponent(s.email)}%00&password=${s.password}`],
      ['JSON text', '{"username":"a","password":"b"}'],
    ];
    const cases = forms.map(([label, payload]) => login(`urlencoded ${label}`, payload, urlencoded));
    cases.push(login('urlencoded with charset=latin1', 'username=%E9&password=x', `${urlencoded}; charset=latin1`));

    const b = 'XyZ';
    const valid = multipart(b, [field('username', s.username), field('password', s.password)]);
    // Cut short: every offset near the closing delimiter, where parsers are most fragile, and a seeded spread of the rest.
    const tail = Array.from({ length: 16 }, (_, i) => valid.length - 1 - i);
    const offsets = [
      ...new Set([
        ...tail,
        ...r.sample(
          Array.from({ length: valid.length - 17 }, (_, i) => i + 1),
          40,
        ),
      ]),
    ].sort((x, y) => x - y);
    // The final CRLF after the close delimiter is optional; any shorter cut is a form cut short: 400.
    for (const at of offsets) {
      const cut = login(`multipart cut at ${at}/${valid.length}`, valid.slice(0, at), `multipart/form-data; boundary=${b}`);
      cases.push(at < valid.length - 2 ? { ...cut, expect: [400] } : cut);
    }
    const type = (boundary: string) => `multipart/form-data; boundary=${boundary}`;
    const parts = [field('username', s.username), field('password', 'wrong-password')];
    const multiparts: [string, string | Buffer, string, (readonly number[])?][] = [
      ['valid, wrong password', multipart(b, parts), type(b)],
      ['no closing delimiter', multipart(b, parts, { close: false }), type(b), [400]],
      ['LF line endings', multipart(b, [field('username', 'a', '\n'), field('password', 'b', '\n')], { eol: '\n' }), type(b), [400]],
      ['boundary mismatch', multipart('Other', parts), type(b), [400]],
      ['quoted boundary', multipart(b, parts), `multipart/form-data; boundary="${b}"`],
      ['boundary of 71 chars', multipart('b'.repeat(71), parts), type('b'.repeat(71))],
      // RFC 2046 allows 70 characters; a longer boundary is an unusable media type.
      ['boundary of 1000 chars', multipart('b'.repeat(1000), parts), type('b'.repeat(1000)), [400, 415]],
      ['empty boundary', multipart('', parts), 'multipart/form-data; boundary='],
      ['boundary with spaces', multipart('a b', parts), 'multipart/form-data; boundary="a b"'],
      ['boundary "--"', multipart('--', parts), type('--')],
      ['two boundary params', multipart(b, parts), `${type(b)}; boundary=other`],
      ['only the closing delimiter', `--${b}--\r\n`, type(b)],
      ['empty body', '', type(b)],
      ['preamble and epilogue', `preamble\r\n${multipart(b, parts)}epilogue`, type(b)],
      ['no Content-Disposition', multipart(b, ['Content-Type: text/plain\r\n\r\nx', ...parts]), type(b)],
      ['Content-Disposition without name', multipart(b, ['Content-Disposition: form-data\r\n\r\nx', ...parts]), type(b)],
      ['name with escaped quote', multipart(b, ['Content-Disposition: form-data; name="user\\"name"\r\n\r\nx', ...parts]), type(b)],
      [
        'file part',
        multipart(b, [
          ...parts,
          'Content-Disposition: form-data; name="avatar"; filename="a.txt"\r\nContent-Type: text/plain\r\n\r\nhello',
        ]),
        type(b),
      ],
      [
        'file part named username',
        multipart(b, ['Content-Disposition: form-data; name="username"; filename="u.txt"\r\n\r\nann', field('password', 'x')]),
        type(b),
      ],
      [
        'filename* parameter',
        multipart(b, [...parts, 'Content-Disposition: form-data; name="f"; filename*=UTF-8\'\'%e2%82%ac.txt\r\n\r\nx']),
        type(b),
      ],
      [
        'JSON part',
        multipart(b, [
          'Content-Disposition: form-data; name="username"\r\nContent-Type: application/json\r\n\r\n{"a":1}',
          field('password', 'x'),
        ]),
        type(b),
      ],
      [
        'base64 transfer encoding',
        multipart(b, [
          'Content-Disposition: form-data; name="username"\r\nContent-Transfer-Encoding: base64\r\n\r\nYW5u',
          field('password', 'x'),
        ]),
        type(b),
      ],
      [
        '11 fields',
        multipart(
          b,
          Array.from({ length: 11 }, (_, i) => field(`f${i}`, 'x')),
        ),
        type(b),
      ],
      ['username missing', multipart(b, [field('password', 'x')]), type(b)],
      ['password missing', multipart(b, [field('username', 'x')]), type(b)],
      ['repeated username', multipart(b, [field('username', 'a'), field('username', 'b'), field('password', 'x')]), type(b)],
      ['field of 4097 bytes', multipart(b, [field('username', 'u'.repeat(4097)), field('password', 'x')]), type(b)],
      ['field of 1 MiB', multipart(b, [field('username', 'u'.repeat(1024 * 1024)), field('password', 'x')]), type(b)],
      ['__proto__ field', multipart(b, [field('__proto__', 'x'), ...parts]), type(b)],
      ['constructor field', multipart(b, [field('constructor', 'x'), ...parts]), type(b)],
      ['NUL in value', multipart(b, [field('username', 'a\u0000b'), field('password', 'x')]), type(b)],
      ['NUL in field name', multipart(b, [field('user\u0000name', 'a'), field('password', 'x')]), type(b)],
      [
        'invalid UTF-8 in value',
        Buffer.concat([
          Buffer.from(`--${b}\r\n${field('username', '')}`),
          Buffer.from([0xff, 0xed, 0xa0, 0x80]),
          Buffer.from(`\r\n--${b}\r\n${field('password', 'x')}\r\n--${b}--\r\n`),
        ]),
        type(b),
      ],
      [
        'nested multipart/mixed',
        multipart(b, [
          'Content-Disposition: form-data; name="username"\r\nContent-Type: multipart/mixed; boundary=inner\r\n\r\n--inner\r\n\r\nx\r\n--inner--',
          field('password', 'x'),
        ]),
        type(b),
      ],
      [
        '2000 part headers',
        multipart(b, [
          `${Array.from({ length: 2000 }, (_, i) => `X-H${i}: v`).join('\r\n')}\r\n${field('username', 'a')}`,
          field('password', 'x'),
        ]),
        type(b),
      ],
      [
        'part header of 100k',
        multipart(b, [`X-Big: ${'h'.repeat(100_000)}\r\n${field('username', 'a')}`, field('password', 'x')]),
        type(b),
      ],
      [
        'garbage between parts',
        `--${b}\r\n${field('username', 'a')}\r\ngarbage--${b}x\r\n--${b}\r\n${field('password', 'x')}\r\n--${b}--\r\n`,
        type(b),
      ],
    ];
    for (const [label, payload, contentType, expect] of multiparts) {
      cases.push({ ...login(`multipart ${label}`, payload, contentType), ...(expect ? { expect } : {}) });
    }
    for (const [i, text] of samples(hostileString(40), seed + 2, 20).entries()) {
      cases.push(
        login(
          `multipart random username #${i} ${describe(text)}`,
          multipart(b, [field('username', text), field('password', 'x')]),
          type(b),
        ),
      );
    }
    return cases;
  },
};
