/** Images for the avatar tests: real ones made with sharp, and hostile ones crafted byte by byte. */
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createDeflate, deflateSync } from 'node:zlib';
import sharp, { type Sharp } from 'sharp';
import { seededRandom } from '../helper.js';

export type Rgb = [number, number, number];
export const RED: Rgb = [255, 0, 0];
export const GREEN: Rgb = [0, 255, 0];
export const BLUE: Rgb = [0, 0, 255];

/** Raw RGB pixels, `colourAt(x, y)` each. */
function pixels(width: number, height: number, colourAt: (x: number, y: number) => Rgb): Sharp {
  const data = Buffer.alloc(width * height * 3);
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) data.set(colourAt(x, y), (y * width + x) * 3);
  }
  return sharp(data, { raw: { width, height, channels: 3 } });
}

/** Vertical bands of equal width, left to right. */
export function bands(width: number, height: number, colours: Rgb[]): Sharp {
  return pixels(width, height, (x) => colours[Math.floor((x * colours.length) / width)]!);
}

/** Noise, so encoders cannot squeeze the file and truncation lands in the pixel data. */
export function noise(width: number, height: number, seed = 1): Sharp {
  const random = seededRandom(seed);
  const next = () => Math.floor(random() * 256);
  return pixels(width, height, () => [next(), next(), next()]);
}

export const png = (image: Sharp = noise(64, 48)) => image.clone().png().toBuffer();
export const jpeg = (image: Sharp = noise(64, 48)) => image.clone().jpeg({ quality: 90 }).toBuffer();
export const webp = (image: Sharp = noise(64, 48)) => image.clone().webp({ quality: 90 }).toBuffer();
export const gif = (image: Sharp = noise(64, 48)) => image.clone().gif().toBuffer();

const CRC_TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});

function crc32(bytes: Buffer): number {
  let c = 0xffffffff;
  for (const byte of bytes) c = CRC_TABLE[(c ^ byte) & 0xff]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/** One PNG chunk with its length and a correct CRC. */
export function pngChunk(type: string, data: Buffer): Buffer {
  const length = Buffer.alloc(4);
  length.writeUInt32BE(data.length);
  const body = Buffer.concat([Buffer.from(type, 'latin1'), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(body));
  return Buffer.concat([length, body, crc]);
}

/**
 * A well-formed PNG (8-bit RGB) that claims `width` × `height` and carries `rows` of pixel data
 * (filter byte and RGB triples per row). With fewer rows than it claims, the header lies.
 */
export function craftedPng(width: number, height: number, rows: number): Buffer {
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header[8] = 8; // bit depth
  header[9] = 2; // RGB
  const row = Buffer.concat([Buffer.from([0]), Buffer.alloc(width * 3, 0x80)]);
  const data = deflateSync(Buffer.concat(Array.from({ length: rows }, () => row)));
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    pngChunk('IHDR', header),
    pngChunk('IDAT', data),
    pngChunk('IEND', Buffer.alloc(0)),
  ]);
}

/** A decompression bomb: a few dozen bytes whose header claims `width` × `height` pixels of zeros. */
export function pngBomb(width = 50_000, height = 50_000): Buffer {
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header[8] = 8;
  header[9] = 2;
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    pngChunk('IHDR', header),
    // The start of a zlib stream of zeros: as much as a decoder would need to begin inflating.
    pngChunk('IDAT', deflateSync(Buffer.alloc(64 * 1024))),
    pngChunk('IEND', Buffer.alloc(0)),
  ]);
}

/** Adam7's passes: where each starts and how far apart its pixels are (x, y, dx, dy). */
const ADAM7 = [
  [0, 0, 8, 8],
  [4, 0, 8, 8],
  [0, 4, 4, 8],
  [2, 0, 4, 4],
  [0, 2, 2, 4],
  [1, 0, 2, 2],
  [0, 1, 1, 2],
] as const;

/**
 * The issue's hostile upload: an interlaced (Adam7) RGB PNG of `width` × `height` at 16 bits a sample,
 * all black. Its pixel data is zeros, which deflate squeezes about a thousandfold (6324×6324: 240 MB
 * raw, 233 kB sent); libpng must decode an interlaced image whole.
 */
export async function interlacedPng16(width: number, height: number): Promise<Buffer> {
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header[8] = 16; // bit depth
  header[9] = 2; // RGB
  header[12] = 1; // Adam7
  let raw = 0;
  for (const [x, y, dx, dy] of ADAM7) {
    const columns = Math.ceil((width - x) / dx);
    const rows = Math.ceil((height - y) / dy);
    if (columns > 0 && rows > 0) raw += rows * (1 + columns * 6);
  }
  // Filter byte 0 and black pixels are all zero bytes: deflated in chunks, never held whole.
  const deflate = createDeflate({ level: 9 });
  const compressed: Buffer[] = [];
  deflate.on('data', (chunk: Buffer) => compressed.push(chunk));
  const zeros = Buffer.alloc(1024 * 1024);
  for (let left = raw; left > 0; left -= zeros.length) {
    if (!deflate.write(zeros.subarray(0, Math.min(left, zeros.length)))) await once(deflate, 'drain');
  }
  deflate.end();
  await once(deflate, 'end');
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    pngChunk('IHDR', header),
    pngChunk('IDAT', Buffer.concat(compressed)),
    pngChunk('IEND', Buffer.alloc(0)),
  ]);
}

/** The RGB colour at (x, y) of a decoded image. */
export async function pixelAt(image: Buffer, x: number, y: number): Promise<Rgb> {
  const { data, info } = await sharp(image).removeAlpha().raw().toBuffer({ resolveWithObject: true });
  const at = (y * info.width + x) * info.channels;
  return [data[at]!, data[at + 1]!, data[at + 2]!];
}

/** Whether two colours are within `tolerance` per channel (WebP is lossy). */
export function near(a: Rgb, b: Rgb, tolerance = 24): boolean {
  return a.every((value, i) => Math.abs(value - b[i]!) <= tolerance);
}

export interface FilePart {
  name: string;
  /** Present: a file part. */
  filename?: string;
  contentType?: string;
  data: Buffer | string;
}

/** A multipart/form-data body of these parts. */
export function multipartBody(parts: FilePart[]): { payload: Buffer; headers: Record<string, string> } {
  const boundary = `----avatar${randomBytes(8).toString('hex')}`;
  const chunks: Buffer[] = [];
  for (const part of parts) {
    const disposition = `form-data; name="${part.name}"${part.filename === undefined ? '' : `; filename="${part.filename}"`}`;
    const type = part.contentType ? `\r\nContent-Type: ${part.contentType}` : '';
    chunks.push(
      Buffer.from(`--${boundary}\r\nContent-Disposition: ${disposition}${type}\r\n\r\n`),
      Buffer.from(part.data),
      Buffer.from('\r\n'),
    );
  }
  chunks.push(Buffer.from(`--${boundary}--\r\n`));
  return { payload: Buffer.concat(chunks), headers: { 'content-type': `multipart/form-data; boundary=${boundary}` } };
}
