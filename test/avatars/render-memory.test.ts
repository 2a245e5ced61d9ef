/**
 * Avatar memory in a real service process (issue 21): concurrent uploads of the hostile PNG
 * (6324×6324, 16 bits, interlaced: 345 MB and 1.2 s a decode, four at once added 1.37 GiB) are
 * refused from their header, and concurrent uploads of the costliest images still taken (a 16
 * megapixel progressive JPEG, and a 4 megapixel interlaced 16-bit PNG, decoded whole: each about
 * 40 to 50 MiB a render) are rendered one at a time. RSS is read from /proc/<pid>/status every
 * 10 ms while they run; the bounds are stated in the assertions.
 */
import { readFile } from 'node:fs/promises';
import sharp from 'sharp';
import t from 'tap';
import { signUp, startService } from '../faults/processes.js';
import { backend, smtpCapture, testEnv } from '../helper.js';
import { interlacedPng16 } from './images.js';

const MiB = 1024 * 1024;
const CONCURRENT = 4;

/** The process's resident set size in bytes, from /proc. */
async function rss(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/^VmRSS:\s+(\d+) kB$/m.exec(status)![1]) * 1024;
}

/** Runs `work` while sampling the process's RSS; resolves with the work's result and the highest sample. */
async function sampled<T>(pid: number, work: () => Promise<T>): Promise<{ result: T; peak: number }> {
  let peak = await rss(pid);
  let done = false;
  const sampling = (async () => {
    while (!done) {
      peak = Math.max(peak, await rss(pid));
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  })();
  const result = await work().finally(() => (done = true));
  await sampling;
  return { result, peak };
}

t.test(
  'concurrent avatar uploads: RSS stays bounded',
  { skip: process.platform !== 'linux' ? 'reads /proc' : backend === 'embedded' && 'one backend is enough: the process is the subject' },
  async (t) => {
    const mailbox = await smtpCapture(t);
    const service = await startService(t, {
      ...(await testEnv(t)),
      LOG_LEVEL: 'warn',
      SMTP_URL: mailbox.url,
      RATE_LIMIT_ANON_PER_MIN: '1000',
    });
    const token = await signUp(service.url, mailbox, `rss_${Date.now().toString(36)}`);
    const pid = service.child.pid!;
    const put = (body: Buffer, type: string) =>
      fetch(`${service.url}/api/users/me/avatar`, {
        method: 'PUT',
        body,
        headers: { authorization: `Bearer ${token}`, 'content-type': type },
      }).then(async (res) => ({ status: res.status, body: await res.text() }));
    const hostile = await interlacedPng16(6324, 6324);
    const blue = (size: number) => sharp({ create: { width: size, height: size, channels: 3, background: '#3366cc' } });
    const photo = await blue(4000).jpeg({ progressive: true }).toBuffer();
    const deep = await blue(2000).toColourspace('rgb16').png({ progressive: true }).toBuffer();
    // Warm: sharp and libvips loaded, the routes compiled.
    t.equal(
      (
        await put(
          await sharp({ create: { width: 64, height: 64, channels: 3, background: '#fff' } })
            .png()
            .toBuffer(),
          'image/png',
        )
      ).status,
      200,
    );

    const before = await rss(pid);
    const refused = await sampled(pid, () => Promise.all(Array.from({ length: CONCURRENT }, () => put(hostile, 'image/png'))));
    t.same(
      refused.result,
      Array(CONCURRENT).fill({ status: 422, body: JSON.stringify({ detail: 'Image is too large: at most 16 megapixels' }) }),
      `${CONCURRENT} hostile PNGs of ${hostile.length} bytes: refused from their header`,
    );
    const refusedGrowth = refused.peak - before;
    t.ok(refusedGrowth < 64 * MiB, `RSS grew by ${(refusedGrowth / MiB).toFixed(1)} MiB (bound 64 MiB)`);

    const base = await rss(pid);
    const costly = () =>
      Promise.all(Array.from({ length: CONCURRENT }, (_, i) => (i % 2 === 0 ? put(photo, 'image/jpeg') : put(deep, 'image/png'))));
    const taken = await sampled(pid, costly);
    t.same(
      taken.result.map((answer) => answer.status),
      Array(CONCURRENT).fill(200),
      `${CONCURRENT / 2} progressive 16 MP JPEGs and ${CONCURRENT / 2} interlaced 16-bit 4 MP PNGs: all rendered`,
    );
    const takenGrowth = taken.peak - base;
    t.ok(takenGrowth < 128 * MiB, `RSS grew by ${(takenGrowth / MiB).toFixed(1)} MiB (bound 128 MiB: one render at a time)`);
  },
);
