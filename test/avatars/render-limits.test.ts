/**
 * What an avatar render may cost (issue 21): an interlaced or 16-bit PNG, which libpng decodes
 * whole, has at most 4 megapixels; renders take turns, and past AVATAR_RENDER_QUEUE_LIMIT waiting
 * an upload is 503 with Retry-After. One app, with no render allowed to wait.
 */
import sharp from 'sharp';
import t from 'tap';
import { bearer, buildAccountsApp, loggedInUser } from '../auth/accounts.js';

const app = await buildAccountsApp(t, { env: { AVATAR_RENDER_QUEUE_LIMIT: '0' } });
const session = await loggedInUser(app);
const upload = (payload: Buffer, type: string) =>
  app.inject({ method: 'PUT', url: '/api/users/me/avatar', payload, headers: { 'content-type': type, ...bearer(session.accessToken) } });
const plain = (width: number, height: number) => sharp({ create: { width, height, channels: 3, background: '#00ff00' } });

t.test('an interlaced or 16-bit PNG is taken up to 4 megapixels and refused past it, from its header', async (t) => {
  const refusal = { detail: 'Image is too large: an interlaced or 16-bit PNG may have at most 4 megapixels' };
  const cases: [string, Promise<Buffer>, boolean][] = [
    ['interlaced, 2000×2000', plain(2000, 2000).png({ progressive: true }).toBuffer(), true],
    ['16-bit, 2000×2000', plain(2000, 2000).toColourspace('rgb16').png().toBuffer(), true],
    ['interlaced 16-bit, 2000×2000', plain(2000, 2000).toColourspace('rgb16').png({ progressive: true }).toBuffer(), true],
    ['interlaced, 2001×2000', plain(2001, 2000).png({ progressive: true }).toBuffer(), false],
    ['16-bit, 4000×1001', plain(4000, 1001).toColourspace('rgb16').png().toBuffer(), false],
  ];
  for (const [label, image, taken] of cases) {
    const res = await upload(await image, 'image/png');
    if (taken) t.equal(res.statusCode, 200, label);
    else {
      t.equal(res.statusCode, 422, label);
      t.same(res.json(), refusal, label);
    }
  }
});

t.test('renders take turns: with none allowed to wait, uploads during a render are 503 with Retry-After', async (t) => {
  // A progressive JPEG of 16 megapixels: a render long enough for the others to arrive meanwhile.
  const photo = await plain(4000, 4000).jpeg({ progressive: true }).toBuffer();
  const answers = await Promise.all(Array.from({ length: 4 }, () => upload(photo, 'image/jpeg')));
  const statuses = answers.map((res) => res.statusCode);
  t.ok(statuses.includes(200) && statuses.includes(503), `one renders, the others find it busy: ${statuses.join(', ')}`);
  t.ok(
    statuses.every((status) => status === 200 || status === 503),
    'and nothing else',
  );
  for (const res of answers.filter((answer) => answer.statusCode === 503)) {
    t.same(res.json(), { detail: 'Too many avatar uploads in progress; try again later' });
    t.ok(Number(res.headers['retry-after']) >= 1, `Retry-After: ${res.headers['retry-after']}`);
  }
  t.equal((await upload(photo, 'image/jpeg')).statusCode, 200, 'once it is done, the next is taken');
});
