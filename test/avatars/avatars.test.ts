import { randomBytes } from 'node:crypto';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import sharp from 'sharp';
import t, { type Test } from 'tap';
import { bearer, buildAccountsApp, loggedInUser, type Session } from '../auth/accounts.js';
import { backend, build } from '../helper.js';
import { BLUE, GREEN, RED, bands, craftedPng, gif, jpeg, multipartBody, near, noise, pixelAt, png, pngBomb, webp } from './images.js';

const MiB = 1024 * 1024;
/** `<owner id>-<22 random base64url characters>` (src/avatars/avatar-names.ts). */
const AVATAR_URL = /^http:\/\/contacts\.test\/avatars\/(([1-9][0-9]*)-[A-Za-z0-9_-]{22})\.webp$/;
/** Not `immutable`: a removed avatar leaves caches within the hour (openapi.yaml). */
const CACHE_CONTROL = 'public, max-age=3600';

function upload(
  app: FastifyInstance,
  session: Session | null,
  payload: Buffer | string,
  contentType: string,
): Promise<LightMyRequestResponse> {
  return app.inject({
    method: 'PUT',
    url: '/api/users/me/avatar',
    payload,
    headers: { 'content-type': contentType, ...(session ? bearer(session.accessToken) : {}) },
  });
}

function uploadForm(app: FastifyInstance, session: Session, parts: Parameters<typeof multipartBody>[0]): Promise<LightMyRequestResponse> {
  const form = multipartBody(parts);
  return app.inject({
    method: 'PUT',
    url: '/api/users/me/avatar',
    payload: form.payload,
    headers: { ...form.headers, ...bearer(session.accessToken) },
  });
}

/** The path of an avatar URL, as the service is asked for it. */
const pathOf = (url: string) => new URL(url).pathname;

/** A 200 User answer whose avatar is a fresh URL; returns that URL. */
function expectAvatarUser(t: Test, res: LightMyRequestResponse, session: Session): string {
  t.equal(res.statusCode, 200, res.body);
  t.match(res.headers['content-type'], /^application\/json/);
  const user = res.json();
  t.same(Object.keys(user).sort(), ['avatar', 'created_at', 'email', 'id', 'is_verified', 'username']);
  t.match(user, { id: session.id, username: session.username, email: session.email, is_verified: true });
  t.match(user.avatar, AVATAR_URL);
  t.equal(AVATAR_URL.exec(user.avatar)?.[2], String(session.id), "the name starts with the owner's id");
  return user.avatar as string;
}

/** The avatar served at `url`: 200, exactly the contract's headers, a 256×256 WebP. */
async function expectServed(t: Test, app: FastifyInstance, url: string): Promise<Buffer> {
  const res = await app.inject({ method: 'GET', url: pathOf(url) });
  t.equal(res.statusCode, 200, `${url} is served`);
  t.equal(res.headers['content-type'], 'image/webp');
  t.equal(res.headers['cache-control'], CACHE_CONTROL);
  t.equal(res.headers['x-ratelimit-limit'], undefined, 'not rate limited');
  t.equal(Number(res.headers['content-length']), res.rawPayload.length);
  const metadata = await sharp(res.rawPayload).metadata();
  t.match(metadata, { format: 'webp', width: 256, height: 256 });
  return res.rawPayload;
}

async function expectGone(t: Test, app: FastifyInstance, url: string) {
  const res = await app.inject({ method: 'GET', url: pathOf(url) });
  t.equal(res.statusCode, 404, `${url} is gone`);
  t.same(res.json(), { detail: 'Avatar not found' });
}

function expectError(t: Test, res: LightMyRequestResponse, status: number, detail: string, label = detail) {
  t.equal(res.statusCode, status, label);
  t.match(res.headers['content-type'], /^application\/json/, label);
  t.same(res.json(), { detail }, label);
}

async function avatarRows(app: FastifyInstance): Promise<{ name: string; user_id: number }[]> {
  return app.db.selectFrom('avatars').select(['name', 'user_id']).orderBy('name').execute();
}

async function storedName(app: FastifyInstance, userId: number): Promise<string | null> {
  const row = await app.db.selectFrom('users').select('avatar').where('id', '=', userId).executeTakeFirstOrThrow();
  return row.avatar;
}

t.test('PUT takes a PNG, JPEG or WebP body and keeps a 256×256 WebP served at the answer URL', async (t) => {
  const app = await buildAccountsApp(t);
  const session = await loggedInUser(app);
  const uploads: [string, Buffer][] = [
    ['image/png', await png()],
    ['image/jpeg', await jpeg()],
    ['image/webp', await webp()],
  ];
  for (const [type, bytes] of uploads) {
    const url = expectAvatarUser(t, await upload(app, session, bytes, type), session);
    await expectServed(t, app, url);
    const me = await app.inject({ method: 'GET', url: '/api/users/me', headers: bearer(session.accessToken) });
    t.equal(me.json().avatar, url, `${type}: /api/users/me shows the new URL`);
    t.same(
      await avatarRows(app),
      [{ name: AVATAR_URL.exec(url)![1], user_id: session.id }],
      `${type}: one stored image, under the URL's name`,
    );
  }
});

t.test('PUT takes the image as the multipart file field `file`', async (t) => {
  const app = await buildAccountsApp(t);
  const session = await loggedInUser(app);
  for (const [contentType, bytes] of [
    ['image/png', await png()],
    ['image/jpeg', await jpeg()],
    ['application/octet-stream', await webp()],
    [undefined, await png()],
  ] as const) {
    const res = await uploadForm(app, session, [{ name: 'file', filename: 'me.img', ...(contentType && { contentType }), data: bytes }]);
    await expectServed(t, app, expectAvatarUser(t, res, session));
  }
});

t.test('the bytes decide the format; the Content-Type only has to be one of the three', async (t) => {
  const app = await buildAccountsApp(t);
  const session = await loggedInUser(app);
  await expectServed(t, app, expectAvatarUser(t, await upload(app, session, await jpeg(), 'image/png'), session));
  await expectServed(t, app, expectAvatarUser(t, await upload(app, session, await png(), 'Image/WEBP; charset=binary'), session));
});

t.test('the rendition is the centre of the image, scaled to 256×256', async (t) => {
  const app = await buildAccountsApp(t);
  const session = await loggedInUser(app);
  // Wide: blue | red | green. Only the red centre square survives.
  const wide = await upload(app, session, await png(bands(300, 100, [BLUE, RED, GREEN])), 'image/png');
  const fromWide = await expectServed(t, app, expectAvatarUser(t, wide, session));
  // A few pixels in from the edges, where the scaler blends in the next band.
  for (const [x, y] of [
    [4, 0],
    [251, 0],
    [128, 128],
    [4, 255],
    [251, 255],
  ] as const) {
    t.ok(near(await pixelAt(fromWide, x, y), RED), `wide: (${x}, ${y}) is red`);
  }
  // Tall: the centre band of rows survives; bands are columns here, so all three remain.
  const tall = await upload(app, session, await png(bands(90, 300, [BLUE, RED, GREEN])), 'image/png');
  const fromTall = await expectServed(t, app, expectAvatarUser(t, tall, session));
  t.ok(near(await pixelAt(fromTall, 10, 128), BLUE), 'tall: the left is blue');
  t.ok(near(await pixelAt(fromTall, 128, 128), RED), 'tall: the middle is red');
  t.ok(near(await pixelAt(fromTall, 245, 128), GREEN), 'tall: the right is green');
});

t.test('the EXIF orientation is applied before cropping, and no metadata is kept', async (t) => {
  const app = await buildAccountsApp(t);
  const session = await loggedInUser(app);
  // Stored as blue | red side by side; orientation 6 shows it turned 90° clockwise: blue above red.
  const turned = await bands(200, 100, [BLUE, RED]).jpeg({ quality: 95 }).withMetadata({ orientation: 6 }).toBuffer();
  const avatar = await expectServed(t, app, expectAvatarUser(t, await upload(app, session, turned, 'image/jpeg'), session));
  t.ok(near(await pixelAt(avatar, 200, 20), BLUE), 'the top right is blue');
  t.ok(near(await pixelAt(avatar, 50, 230), RED), 'the bottom left is red');
  const metadata = await sharp(avatar).metadata();
  t.equal(metadata.exif, undefined, 'no EXIF');
  t.equal(metadata.orientation, undefined, 'no orientation tag');
});

t.test('every upload gets a new URL; the previous one is 404 at once, and only one image is stored', async (t) => {
  const app = await buildAccountsApp(t);
  const session = await loggedInUser(app);
  const bytes = await png();
  const first = expectAvatarUser(t, await upload(app, session, bytes, 'image/png'), session);
  const second = expectAvatarUser(t, await upload(app, session, bytes, 'image/png'), session);
  t.not(second, first, 'the same image uploaded again gets a new URL');
  await expectGone(t, app, first);
  await expectServed(t, app, second);
  t.same(await avatarRows(app), [{ name: AVATAR_URL.exec(second)![1], user_id: session.id }]);
});

t.test('concurrent uploads by one user leave exactly one avatar, the one the user row names', async (t) => {
  const app = await buildAccountsApp(t);
  const session = await loggedInUser(app);
  const bytes = await Promise.all([1, 2, 3, 4, 5].map((seed) => png(noise(32, 32, seed))));
  const answers = await Promise.all(bytes.map((image) => upload(app, session, image, 'image/png')));
  const urls = answers.map((res) => expectAvatarUser(t, res, session));
  t.equal(new Set(urls).size, urls.length, 'every upload got its own URL');
  const rows = await avatarRows(app);
  t.equal(rows.length, 1, 'one image is stored');
  const current = await storedName(app, session.id);
  t.equal(rows[0]?.name, current, 'it is the one the user names');
  for (const url of urls) {
    if (AVATAR_URL.exec(url)![1] === current) await expectServed(t, app, url);
    else await expectGone(t, app, url);
  }
});

t.test('DELETE removes the avatar: 204, avatar null, the URL 404; removing none is 204 too', async (t) => {
  const app = await buildAccountsApp(t);
  const session = await loggedInUser(app);
  const url = expectAvatarUser(t, await upload(app, session, await png(), 'image/png'), session);
  const removed = await app.inject({ method: 'DELETE', url: '/api/users/me/avatar', headers: bearer(session.accessToken) });
  t.equal(removed.statusCode, 204);
  t.equal(removed.body, '');
  const me = await app.inject({ method: 'GET', url: '/api/users/me', headers: bearer(session.accessToken) });
  t.equal(me.json().avatar, null);
  await expectGone(t, app, url);
  t.same(await avatarRows(app), []);
  const again = await app.inject({ method: 'DELETE', url: '/api/users/me/avatar', headers: bearer(session.accessToken) });
  t.equal(again.statusCode, 204);
  t.equal(again.body, '');
});

t.test("one user's upload or removal leaves another's avatar alone", async (t) => {
  const app = await buildAccountsApp(t);
  const ann = await loggedInUser(app);
  const bob = await loggedInUser(app);
  const annUrl = expectAvatarUser(t, await upload(app, ann, await png(), 'image/png'), ann);
  const bobUrl = expectAvatarUser(t, await upload(app, bob, await jpeg(), 'image/jpeg'), bob);
  expectAvatarUser(t, await upload(app, bob, await webp(), 'image/webp'), bob);
  await expectGone(t, app, bobUrl);
  t.equal((await app.inject({ method: 'DELETE', url: '/api/users/me/avatar', headers: bearer(bob.accessToken) })).statusCode, 204);
  await expectServed(t, app, annUrl);
  t.equal(await storedName(app, ann.id), AVATAR_URL.exec(annUrl)![1]);
});

t.test('GET /avatars/… needs no token and is never rate limited; unknown names are 404', async (t) => {
  // The anonymous limit as configured by default: 20 a minute per address.
  const app = await build(t);
  const session = await loggedInUser(app);
  const url = expectAvatarUser(t, await upload(app, session, await png(), 'image/png'), session);
  for (let i = 0; i < 25; i++) {
    const res = await app.inject({ method: 'GET', url: pathOf(url) });
    if (res.statusCode !== 200) t.fail(`request ${i + 1}: ${res.statusCode}`);
    t.equal(res.headers['x-ratelimit-limit'], undefined);
  }
  const head = await app.inject({ method: 'HEAD', url: pathOf(url) });
  t.equal(head.statusCode, 200);
  t.equal(head.headers['content-type'], 'image/webp');
  t.equal(head.body, '');
  // The limit is real: anonymous /api requests from the same address run into it.
  let limited: LightMyRequestResponse | undefined;
  for (let i = 0; i < 25 && !limited; i++) {
    const res = await app.inject({ method: 'GET', url: '/api/users/me' });
    if (res.statusCode === 429) limited = res;
  }
  t.ok(limited, 'anonymous /api requests are limited');
  t.equal((await app.inject({ method: 'GET', url: pathOf(url) })).statusCode, 200, 'the avatar is still served');

  const random = AVATAR_URL.exec(url)![1]!.slice(`${session.id}-`.length);
  for (const name of [
    'AAAAAAAAAAAAAAAAAAAAAA',
    random,
    `${session.id + 1}-${random}`,
    `0${session.id}-${random}`,
    `2147483648-${random}`,
    `99999999999999999999-${random}`,
    `${session.id}-${random}x`,
    'short',
    'x'.repeat(90),
    'not-a-name!',
    `${AVATAR_URL.exec(url)![1]}.webp`,
  ]) {
    const res = await app.inject({ method: 'GET', url: `/avatars/${encodeURIComponent(name)}.webp` });
    expectError(t, res, 404, 'Avatar not found');
  }
  expectError(t, await app.inject({ method: 'GET', url: pathOf(url).replace('.webp', '.png') }), 404, 'Not Found');
  expectError(t, await app.inject({ method: 'GET', url: '/avatars/a%00b.webp' }), 422, 'params/name must not contain NUL characters');
});

t.test(
  'another instance on the same database serves the avatar',
  { skip: backend === 'embedded' && 'the embedded database belongs to one process' },
  async (t) => {
    const first = await buildAccountsApp(t);
    const second = await buildAccountsApp(t, { env: { DATABASE_URL: first.config.databaseUrl! } });
    const session = await loggedInUser(first);
    const url = expectAvatarUser(t, await upload(first, session, await png(), 'image/png'), session);
    const there = await expectServed(t, second, url);
    const here = await expectServed(t, first, url);
    t.ok(there.equals(here), 'the same bytes');
    t.equal((await second.inject({ method: 'DELETE', url: '/api/users/me/avatar', headers: bearer(session.accessToken) })).statusCode, 204);
    await expectGone(t, first, url);
  },
);

t.test('a user deleted from the database takes the avatar along', async (t) => {
  const app = await buildAccountsApp(t);
  const session = await loggedInUser(app);
  const url = expectAvatarUser(t, await upload(app, session, await png(), 'image/png'), session);
  await app.db.deleteFrom('users').where('id', '=', session.id).execute();
  await expectGone(t, app, url);
  t.same(await avatarRows(app), []);
});

t.test('refused uploads store nothing and leave the previous avatar in place', async (t) => {
  const app = await buildAccountsApp(t);
  const session = await loggedInUser(app);
  const valid = await png();
  const sample = await png(noise(120, 90, 7));
  const jpg = await jpeg(noise(120, 90, 7));
  const wbp = await webp(noise(120, 90, 7));
  const refused: [string, () => Promise<LightMyRequestResponse>, number, string][] = [
    ['GIF as image/gif', async () => upload(app, session, await gif(), 'image/gif'), 415, 'Unsupported Media Type: image/gif'],
    ['PNG as text/plain', async () => upload(app, session, valid, 'text/plain'), 415, 'Unsupported Media Type: text/plain'],
    [
      'PNG as application/octet-stream',
      async () => upload(app, session, valid, 'application/octet-stream'),
      415,
      'Unsupported Media Type: application/octet-stream',
    ],
    ['JSON', async () => upload(app, session, '{"file":"x"}', 'application/json'), 415, 'Unsupported Media Type: application/json'],
    [
      '2 MiB + 1 byte',
      async () => upload(app, session, Buffer.concat([valid, randomBytes(2 * MiB + 1 - valid.length)]), 'image/png'),
      413,
      'Request body is too large',
    ],
    [
      'multipart file of 2 MiB + 1 byte',
      async () => uploadForm(app, session, [{ name: 'file', filename: 'a.png', contentType: 'image/png', data: randomBytes(2 * MiB + 1) }]),
      413,
      'Request body is too large',
    ],
    [
      '2 MiB of random bytes (the largest body taken)',
      async () => upload(app, session, randomBytes(2 * MiB), 'image/png'),
      422,
      'Not a valid image',
    ],
    [
      'multipart file of 2 MiB of random bytes',
      async () => uploadForm(app, session, [{ name: 'file', filename: 'a.png', data: randomBytes(2 * MiB) }]),
      422,
      'Not a valid image',
    ],
    ['random bytes', async () => upload(app, session, randomBytes(1000), 'image/png'), 422, 'Not a valid image'],
    ['an empty body', async () => upload(app, session, '', 'image/png'), 422, 'Not a valid image'],
    [
      'no body at all',
      () => app.inject({ method: 'PUT', url: '/api/users/me/avatar', headers: bearer(session.accessToken) }),
      422,
      'body is required',
    ],
    ['a GIF sent as image/png', async () => upload(app, session, await gif(), 'image/png'), 422, 'Not a valid image'],
    [
      'an SVG sent as image/png',
      async () => upload(app, session, '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"/>', 'image/png'),
      422,
      'Not a valid image',
    ],
    [
      'a TIFF sent as image/jpeg',
      async () => upload(app, session, await noise(16, 16).tiff().toBuffer(), 'image/jpeg'),
      422,
      'Not a valid image',
    ],
    ['a PNG signature and nothing else', async () => upload(app, session, sample.subarray(0, 8), 'image/png'), 422, 'Not a valid image'],
    ['a PNG cut in its header', async () => upload(app, session, sample.subarray(0, 20), 'image/png'), 422, 'Not a valid image'],
    [
      'a PNG cut in its pixel data',
      async () => upload(app, session, sample.subarray(0, sample.length >> 1), 'image/png'),
      422,
      'Not a valid image',
    ],
    [
      'a PNG cut in its end chunk',
      async () => upload(app, session, sample.subarray(0, sample.length - 4), 'image/png'),
      422,
      'Not a valid image',
    ],
    ['a JPEG cut in half', async () => upload(app, session, jpg.subarray(0, jpg.length >> 1), 'image/jpeg'), 422, 'Not a valid image'],
    [
      'a JPEG without its last bytes',
      async () => upload(app, session, jpg.subarray(0, jpg.length - 2), 'image/jpeg'),
      422,
      'Not a valid image',
    ],
    ['a WebP cut in half', async () => upload(app, session, wbp.subarray(0, wbp.length >> 1), 'image/webp'), 422, 'Not a valid image'],
    [
      'a PNG whose header claims more rows than it has',
      async () => upload(app, session, craftedPng(100, 100, 10), 'image/png'),
      422,
      'Not a valid image',
    ],
    [
      'a PNG whose header CRC is wrong',
      async () => {
        const broken = Buffer.from(sample);
        broken[29]! ^= 0xff;
        return upload(app, session, broken, 'image/png');
      },
      422,
      'Not a valid image',
    ],
    [
      'a PNG with a byte of pixel data flipped',
      async () => {
        const broken = Buffer.from(sample);
        broken[sample.length >> 1]! ^= 0xff;
        return upload(app, session, broken, 'image/png');
      },
      422,
      'Not a valid image',
    ],
    [
      'a decompression bomb (50000×50000 in a few hundred bytes)',
      async () => upload(app, session, pngBomb(), 'image/png'),
      422,
      'Image is too large: at most 16 megapixels',
    ],
    [
      'a header just past 16 megapixels',
      async () => upload(app, session, pngBomb(4001, 4000), 'image/png'),
      422,
      'Image is too large: at most 16 megapixels',
    ],
    ['multipart: no file', () => uploadForm(app, session, []), 422, 'body/file is required'],
    [
      'multipart: `file` as a text field',
      () => uploadForm(app, session, [{ name: 'file', data: 'not a file' }]),
      422,
      'body/file must be a file',
    ],
    [
      'multipart: two files',
      () =>
        uploadForm(app, session, [
          { name: 'file', filename: 'a.png', data: valid },
          { name: 'file', filename: 'b.png', data: valid },
        ]),
      422,
      'body must contain at most 1 file',
    ],
    [
      'multipart: the file under another name',
      () => uploadForm(app, session, [{ name: 'photo', filename: 'a.png', data: valid }]),
      422,
      'body/file is required',
    ],
    [
      'multipart: a text field besides the file',
      () =>
        uploadForm(app, session, [
          { name: 'file', filename: 'a.png', data: valid },
          { name: 'caption', data: 'me' },
        ]),
      422,
      'body/caption is not an allowed property',
    ],
    [
      'multipart: a file that is no image',
      () => uploadForm(app, session, [{ name: 'file', filename: 'a.png', contentType: 'image/png', data: randomBytes(500) }]),
      422,
      'Not a valid image',
    ],
    [
      'multipart: a text part declared JSON that is not',
      () =>
        uploadForm(app, session, [
          { name: 'file', filename: 'a.png', data: valid },
          { name: 'meta', contentType: 'application/json', data: '{not json' },
        ]),
      400,
      'Malformed multipart body',
    ],
    [
      'multipart cut short',
      async () => {
        const form = multipartBody([{ name: 'file', filename: 'a.png', data: valid }]);
        return app.inject({
          method: 'PUT',
          url: '/api/users/me/avatar',
          payload: form.payload.subarray(0, form.payload.length >> 1),
          headers: { ...form.headers, ...bearer(session.accessToken) },
        });
      },
      400,
      'Malformed multipart body',
    ],
  ];

  // First with no avatar: nothing may be stored.
  for (const [label, send, status, detail] of refused) expectError(t, await send(), status, detail, label);
  t.same(await avatarRows(app), [], 'no image stored');
  t.equal(await storedName(app, session.id), null, 'the user has no avatar');

  // Then with one: it stays.
  const url = expectAvatarUser(t, await upload(app, session, valid, 'image/png'), session);
  for (const [label, send, status] of refused) {
    t.equal((await send()).statusCode, status, `${label}, with an avatar in place`);
  }
  t.same(await avatarRows(app), [{ name: AVATAR_URL.exec(url)![1], user_id: session.id }], 'the previous image is the only one');
  await expectServed(t, app, url);
});

t.test('an image of exactly 16 megapixels is taken', async (t) => {
  const app = await buildAccountsApp(t);
  const session = await loggedInUser(app);
  const large = await sharp({ create: { width: 4000, height: 4000, channels: 3, background: '#00ff00' } })
    .png()
    .toBuffer();
  t.ok(large.length < 2 * MiB, `${large.length} bytes`);
  const avatar = await expectServed(t, app, expectAvatarUser(t, await upload(app, session, large, 'image/png'), session));
  t.ok(near(await pixelAt(avatar, 128, 128), GREEN));
});

t.test('authentication comes first: 401 before 413, 415 and 422', async (t) => {
  const app = await buildAccountsApp(t);
  const session = await loggedInUser(app);
  const valid = await png();
  const attempts: [string, Record<string, string>, Buffer | string][] = [
    ['a valid PNG', { 'content-type': 'image/png' }, valid],
    ['a GIF', { 'content-type': 'image/gif' }, await gif()],
    ['3 MiB', { 'content-type': 'image/png' }, randomBytes(3 * MiB)],
    ['random bytes', { 'content-type': 'image/png' }, randomBytes(100)],
  ];
  for (const [label, headers, payload] of attempts) {
    for (const auth of [{}, bearer('garbage'), bearer(session.refreshToken)]) {
      const res = await app.inject({ method: 'PUT', url: '/api/users/me/avatar', payload, headers: { ...headers, ...auth } });
      expectError(t, res, 401, 'Not authenticated');
      t.equal(res.headers['www-authenticate'], 'Bearer', label);
    }
  }
  const removal = await app.inject({ method: 'DELETE', url: '/api/users/me/avatar' });
  expectError(t, removal, 401, 'Not authenticated');
  t.same(await avatarRows(app), []);
});

t.test("an upload counts in the user's avatar bucket, not in /me's; a removal counts in none", async (t) => {
  const app = await buildAccountsApp(t, { env: { RATE_LIMIT_ME_PER_MIN: '1', RATE_LIMIT_AVATAR_PER_MIN: '8' } });
  const session = await loggedInUser(app);
  const bytes = await png(noise(16, 16));
  for (let i = 0; i < 8; i++) {
    const res = await upload(app, session, bytes, 'image/png');
    t.equal(res.statusCode, 200);
    t.equal(res.headers['x-ratelimit-limit'], '8');
    t.equal(res.headers['x-ratelimit-remaining'], String(7 - i));
    const removal = await app.inject({ method: 'DELETE', url: '/api/users/me/avatar', headers: bearer(session.accessToken) });
    t.equal(removal.statusCode, 204);
    t.equal(removal.headers['x-ratelimit-limit'], undefined);
  }
});

t.test('operations that take no body refuse an image body like any other unknown type', async (t) => {
  const app = await buildAccountsApp(t);
  const session = await loggedInUser(app);
  const bytes = await png();
  for (const [method, url] of [
    ['DELETE', '/api/users/me/avatar'],
    ['POST', '/api/auth/logout'],
  ] as const) {
    const res = await app.inject({ method, url, payload: bytes, headers: { 'content-type': 'image/png', ...bearer(session.accessToken) } });
    expectError(t, res, 415, 'Unsupported Media Type: image/png');
  }
  // Operations that take JSON refuse it before reading it.
  const register = await app.inject({
    method: 'POST',
    url: '/api/auth/register',
    payload: bytes,
    headers: { 'content-type': 'image/png' },
  });
  expectError(t, register, 415, 'Unsupported Media Type: image/png');
  // Unknown routes stay 404.
  expectError(
    t,
    await app.inject({ method: 'POST', url: '/api/nope', payload: bytes, headers: { 'content-type': 'image/png' } }),
    404,
    'Not Found',
  );
});
