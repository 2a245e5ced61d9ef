import sharp from 'sharp';
import { ValidationFailed } from '../../plugins/http/errors.js';

/**
 * Width × height an upload may have, checked from its header before any pixel is decoded: a 12 MP
 * phone photo fits, and a render costs at most about 50 MiB (a progressive JPEG is the worst).
 */
const MAX_IMAGE_PIXELS = 16_000_000;
/**
 * The same for an interlaced PNG, or one with more than 8 bits a sample: libpng decodes those whole
 * (up to 8 bytes a pixel), so 4 megapixels take about 32 MiB. 6324×6324 at 16 bits took 345 MB.
 */
const MAX_WHOLE_DECODE_PIXELS = 4_000_000;
/** The stored rendition is AVATAR_SIZE × AVATAR_SIZE. */
const AVATAR_SIZE = 256;

export const NOT_AN_IMAGE = 'Not a valid image';
export const TOO_MANY_PIXELS = `Image is too large: at most ${MAX_IMAGE_PIXELS / 1_000_000} megapixels`;
export const TOO_MANY_PIXELS_WHOLE = `Image is too large: an interlaced or 16-bit PNG may have at most ${MAX_WHOLE_DECODE_PIXELS / 1_000_000} megapixels`;

type Format = 'png' | 'jpeg' | 'webp';

// Every upload is decoded once: libvips' operation cache would only hold on to their memory.
sharp.cache(false);

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
/** The IEND chunk's type and CRC, with which a PNG ends. */
const PNG_END = Buffer.from([0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82]);

/** JPEG's start-of-scan and end-of-image markers. */
const JPEG_SOS = Buffer.from([0xff, 0xda]);
const JPEG_EOI = Buffer.from([0xff, 0xd9]);

/**
 * Whether a PNG or JPEG reaches its end marker; the decoders only warn when it is missing. A PNG
 * ends with its IEND chunk. A JPEG's last scan ends with EOI: after the last start-of-scan marker
 * the entropy-coded data never holds FF D9 (an FF there is always followed by 00 or a restart
 * marker), so an EOI after it is the end of the image.
 */
function reachesItsEnd(bytes: Buffer, format: Format): boolean {
  if (format === 'png') return bytes.includes(PNG_END);
  if (format === 'jpeg') {
    const lastScan = bytes.lastIndexOf(JPEG_SOS);
    return lastScan !== -1 && bytes.indexOf(JPEG_EOI, lastScan + 2) !== -1;
  }
  return true;
}

/**
 * The format the bytes' signature names, among those taken; null for anything else. libvips picks
 * its decoder by the same signature, so no other decoder (SVG, TIFF, HEIF, …) ever sees an upload.
 */
function sniffFormat(bytes: Buffer): Format | null {
  if (bytes.subarray(0, 8).equals(PNG_SIGNATURE)) return 'png';
  if (bytes[0] === 0xff && bytes[1] === 0xd8 && bytes[2] === 0xff) return 'jpeg';
  if (bytes.toString('latin1', 0, 4) === 'RIFF' && bytes.toString('latin1', 8, 12) === 'WEBP') return 'webp';
  return null;
}

/**
 * The bytes of an upload, checked from its header alone (nothing decoded): 422 for bytes that are not
 * a PNG, JPEG or WebP image reaching its end, for more than MAX_IMAGE_PIXELS (a decompression bomb
 * costs nothing), and for an interlaced or 16-bit PNG over MAX_WHOLE_DECODE_PIXELS.
 */
export async function checkUpload(upload: Uint8Array): Promise<Buffer> {
  const bytes = Buffer.from(upload.buffer, upload.byteOffset, upload.byteLength);
  const format = sniffFormat(bytes);
  if (format === null || !reachesItsEnd(bytes, format)) throw new ValidationFailed(NOT_AN_IMAGE);
  const header = await sharp(bytes, { limitInputPixels: false })
    .metadata()
    .catch(() => null);
  if (!header || header.format !== format || !header.width || !header.height) throw new ValidationFailed(NOT_AN_IMAGE);
  const pixels = header.width * header.height;
  if (pixels > MAX_IMAGE_PIXELS) throw new ValidationFailed(TOO_MANY_PIXELS);
  const decodedWhole = format === 'png' && (header.isProgressive === true || (header.bitsPerSample ?? 8) > 8);
  if (decodedWhole && pixels > MAX_WHOLE_DECODE_PIXELS) throw new ValidationFailed(TOO_MANY_PIXELS_WHOLE);
  return bytes;
}

/**
 * The avatar rendition of an upload `checkUpload` passed: oriented by its EXIF tag, centre-cropped
 * and scaled to AVATAR_SIZE square, as WebP, without the upload's metadata. Throws 422 when the
 * image does not decode completely.
 */
export async function renderAvatar(bytes: Buffer): Promise<Buffer> {
  try {
    // libvips holds the pixel limit too, and fails on errors and truncation, not on mere warnings.
    return await sharp(bytes, { limitInputPixels: MAX_IMAGE_PIXELS, failOn: 'error' })
      .autoOrient()
      .resize(AVATAR_SIZE, AVATAR_SIZE, { fit: 'cover', position: 'centre' })
      .webp({ quality: 80 })
      .toBuffer();
  } catch {
    throw new ValidationFailed(NOT_AN_IMAGE);
  }
}
