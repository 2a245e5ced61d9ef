/**
 * Hostile uploads, seeded: every format cut short at many offsets, bytes flipped, headers that
 * claim absurd sizes, signatures followed by garbage. The contract: never a 5xx; 200 with a served
 * avatar, or 422 `{detail}` that stored nothing.
 */
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { bearer, buildAccountsApp, loggedInUser } from '../auth/accounts.js';
import { seededRandom } from '../helper.js';
import { craftedPng, jpeg, noise, png, pngChunk, webp } from './images.js';

const SEED = Number(process.env.HOSTILE_SEED ?? 20261122);
const NOT_AN_IMAGE = { detail: 'Not a valid image' };
const TOO_MANY_PIXELS = { detail: 'Image is too large: at most 16 megapixels' };

const app = await buildAccountsApp({ teardown: (fn) => t.teardown(fn), fail: (problem) => t.fail(problem) });
const session = await loggedInUser(app);
const put = (payload: Buffer, type: string) =>
  app.inject({ method: 'PUT', url: '/api/users/me/avatar', payload, headers: { 'content-type': type, ...bearer(session.accessToken) } });
const storedRows = async () => (await app.db.selectFrom('avatars').select('name').execute()).length;

const random = seededRandom(SEED);
const int = (max: number) => Math.floor(random() * max);
const samples = {
  png: await png(noise(96, 64, SEED)),
  jpeg: await jpeg(noise(96, 64, SEED)),
  webp: await webp(noise(96, 64, SEED)),
};

t.test('every format cut short anywhere is 422 Not a valid image', async (t) => {
  for (const [format, bytes] of Object.entries(samples)) {
    const offsets = new Set([0, 1, 2, 3, 7, 8, 11, 12, 16, 20, 24, 30, 33, bytes.length - 2, bytes.length - 1]);
    while (offsets.size < 60) offsets.add(int(bytes.length));
    const wrong: string[] = [];
    for (const at of [...offsets].sort((a, b) => a - b)) {
      const res = await put(bytes.subarray(0, at), `image/${format}`);
      if (res.statusCode !== 422 || res.body !== JSON.stringify(NOT_AN_IMAGE))
        wrong.push(`cut at ${at}/${bytes.length}: ${res.statusCode} ${res.body.slice(0, 100)}`);
    }
    t.same(wrong, [], `${format}: ${offsets.size} cuts refused`);
  }
  t.equal(await storedRows(), 0, 'nothing stored');
});

t.test('flipped bytes are either decoded or refused with 422, never a server error', async (t) => {
  for (const [format, bytes] of Object.entries(samples)) {
    const wrong: string[] = [];
    let accepted = 0;
    for (let i = 0; i < 40; i++) {
      const broken = Buffer.from(bytes);
      const at = int(bytes.length);
      broken[at] = broken[at]! ^ (1 + int(255));
      const res = await put(broken, `image/${format}`);
      if (res.statusCode === 200) accepted++;
      else if (res.statusCode !== 422 || res.body !== JSON.stringify(NOT_AN_IMAGE))
        wrong.push(`byte ${at}: ${res.statusCode} ${res.body.slice(0, 100)}`);
    }
    t.same(wrong, [], `${format}: 40 flipped bytes, ${accepted} still decoded`);
  }
  t.ok((await storedRows()) <= 1, 'at most the one current avatar is stored');
});

t.test('a signature followed by garbage is 422', async (t) => {
  const signatures: [string, Buffer][] = [
    ['image/png', Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])],
    ['image/jpeg', Buffer.from([0xff, 0xd8, 0xff, 0xe0])],
    ['image/webp', Buffer.concat([Buffer.from('RIFF'), Buffer.from([0xff, 0xff, 0xff, 0x7f]), Buffer.from('WEBPVP8 ')])],
  ];
  for (const [type, signature] of signatures) {
    for (const length of [0, 1, 16, 1000, 100_000]) {
      const res = await put(Buffer.concat([signature, randomBytes(length)]), type);
      t.equal(res.statusCode, 422, `${type} signature + ${length} random bytes`);
      t.same(res.json(), NOT_AN_IMAGE);
    }
  }
});

t.test('headers claiming huge or impossible images are refused from the header', async (t) => {
  const ihdr = (width: number, height: number, depth = 8, colour = 2, interlace = 0) => {
    const header = Buffer.alloc(13);
    header.writeUInt32BE(width, 0);
    header.writeUInt32BE(height, 4);
    header[8] = depth;
    header[9] = colour;
    header[12] = interlace;
    const valid = craftedPng(4, 4, 4);
    // Signature, then the new IHDR in place of the valid one (8 + 25 bytes), then the rest.
    return Buffer.concat([valid.subarray(0, 8), pngChunk('IHDR', header), valid.subarray(33)]);
  };
  const jpegSized = (width: number, height: number) => {
    const bytes = Buffer.from(samples.jpeg);
    const sof = bytes.indexOf(Buffer.from([0xff, 0xc0]));
    bytes.writeUInt16BE(height, sof + 5);
    bytes.writeUInt16BE(width, sof + 7);
    return bytes;
  };
  const webpSized = (width: number, height: number) => {
    const bytes = Buffer.from(samples.webp);
    // A lossy WebP: 'VP8 ' chunk at 12, its frame header's 14-bit sizes at 26 and 28.
    t.equal(bytes.toString('latin1', 12, 16), 'VP8 ', 'a simple lossy WebP');
    bytes.writeUInt16LE(width, 26);
    bytes.writeUInt16LE(height, 28);
    return bytes;
  };
  const cases: [string, Buffer, string, object][] = [
    ['PNG 1000000×1000000', ihdr(1_000_000, 1_000_000), 'image/png', TOO_MANY_PIXELS],
    // Past libvips' own largest dimension: its header reader refuses it.
    ['PNG 2^31-1 × 1', ihdr(0x7fffffff, 1), 'image/png', NOT_AN_IMAGE],
    ['PNG 16001×1000', ihdr(16_001, 1000), 'image/png', TOO_MANY_PIXELS],
    ['PNG 0×0', ihdr(0, 0), 'image/png', NOT_AN_IMAGE],
    ['PNG 2^32-1 wide (beyond the PNG limit)', ihdr(0xffffffff, 1), 'image/png', NOT_AN_IMAGE],
    ['PNG bit depth 3', ihdr(4, 4, 3), 'image/png', NOT_AN_IMAGE],
    ['PNG colour type 7', ihdr(4, 4, 8, 7), 'image/png', NOT_AN_IMAGE],
    ['PNG interlace 9', ihdr(4, 4, 8, 2, 9), 'image/png', NOT_AN_IMAGE],
    ['PNG claiming 1000×1000, 4 rows of data', ihdr(1000, 1000), 'image/png', NOT_AN_IMAGE],
    ['JPEG 60000×60000', jpegSized(60_000, 60_000), 'image/jpeg', TOO_MANY_PIXELS],
    // libjpeg's own limit is 65500.
    ['JPEG 65535×65535', jpegSized(65_535, 65_535), 'image/jpeg', NOT_AN_IMAGE],
    ['JPEG 0×0', jpegSized(0, 0), 'image/jpeg', NOT_AN_IMAGE],
    ['WebP 16383×16383', webpSized(16_383, 16_383), 'image/webp', TOO_MANY_PIXELS],
    ['WebP claiming 2000×2000', webpSized(2000, 2000), 'image/webp', NOT_AN_IMAGE],
  ];
  for (const [label, bytes, type, answer] of cases) {
    const res = await put(bytes, type);
    t.equal(res.statusCode, 422, label);
    t.same(res.json(), answer, label);
  }
  t.ok((await storedRows()) <= 1, 'nothing new stored');

  // A JPEG whose header claims more rows than its data holds, but that ends properly, is decoded
  // the way libjpeg does (the missing rows grey) rather than refused: refusing libjpeg's warnings
  // would refuse many real photos too. It is an image of allowed size, and never a server error.
  const lying = await put(jpegSized(2000, 2000), 'image/jpeg');
  t.ok([200, 422].includes(lying.statusCode), `a JPEG claiming 2000×2000: ${lying.statusCode}`);
});
