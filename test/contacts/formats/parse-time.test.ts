/**
 * Reading an import takes time in proportion to its size, whatever its shape (issue 21): adversarial
 * cards and CSV bodies, drawn by fast-check, are read at one size and at eight times it, and the
 * second takes less than 16 times as long. A parser that copies a growing value at every line (as
 * the vCard reader once did on quoted-printable soft line breaks) takes about 64 times as long.
 *
 * Time is this process's CPU time, which other processes on a busy machine do not add to; each size
 * counts its fastest of a few alternating rounds after a warm-up. Noise only ever makes a ratio
 * larger, so a shape is measured up to three times and its smallest ratio counts: a parser that is
 * really quadratic shows about 64 every time.
 */
import fc from 'fast-check';
import t, { type Test } from 'tap';
import { parseCsv } from '../../../src/contacts/formats/csv.js';
import type { ImportResult } from '../../../src/contacts/formats/entries.js';
import { parseVcards } from '../../../src/contacts/formats/vcard.js';

const SEED = 20261122;
const GROWTH = 8;
const MAX_RATIO = 16;
const WARM_UP = 2;
const ROUNDS = 3;
const ATTEMPTS = 3;
const SHAPES = 8;
/**
 * The repeated part of the smaller body, in characters; the larger body repeats it 8 times as often.
 * In vCard it fills each of 32 cards, so that a run of continuation lines grows 8 times too. A card
 * stays under 32 KiB even when large: V8 allocates strings over 128 KiB apart, at a higher cost per
 * byte, and a line crossing that size between the two bodies made a linear reader look 20 times as
 * slow on Node 22. CSV rows of the wrong length each cost csv-parse an Error object, so its bodies
 * are smaller.
 */
const BASE = { vcard: 3_000, csv: 16_000 };
const CARDS = 32;
/** As the service reads an import: at most its entry limit + 1. */
const OPTIONS = { maxEntries: 10_001 };

/** CPU time of this process in ms. */
function cpuMs(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1000;
}

/** Time of `read(large)` ÷ time of `read(small)`, each the fastest of rounds alternating between them. */
function ratioOnce(read: (body: string) => ImportResult, small: string, large: string): number {
  for (let warm = 0; warm < WARM_UP; warm++) {
    read(small);
    read(large);
  }
  const best = { small: Infinity, large: Infinity };
  for (let round = 0; round < ROUNDS; round++) {
    for (const size of ['small', 'large'] as const) {
      const started = cpuMs();
      read(size === 'small' ? small : large);
      best[size] = Math.min(best[size], cpuMs() - started);
    }
  }
  return best.large / best.small;
}

/** The smallest ratio of up to ATTEMPTS measurements, stopping at the first under MAX_RATIO. */
function ratio(read: (body: string) => ImportResult, small: string, large: string): number {
  let smallest = Infinity;
  for (let attempt = 0; attempt < ATTEMPTS && smallest >= MAX_RATIO; attempt++)
    smallest = Math.min(smallest, ratioOnce(read, small, large));
  return smallest;
}

/** `unit` repeated to about `base` characters, and GROWTH times as often, each wrapped by `wrap`. */
function bodies(unit: string, base: number, wrap: (repeated: string) => string): { small: string; large: string } {
  const times = Math.ceil(base / unit.length);
  return { small: wrap(unit.repeat(times)), large: wrap(unit.repeat(times * GROWTH)) };
}

/** Checks every shape `unit` draws, repeated to `base` characters; `wrap` makes a body of the repeated unit. */
function linearIn(
  t: Test,
  read: (body: string) => ImportResult,
  unit: fc.Arbitrary<string>,
  base: number,
  wrap: (repeated: string) => string,
  examples: string[] = [],
) {
  const ratios: number[] = [];
  fc.assert(
    fc.property(unit, (text) => {
      const { small, large } = bodies(text, base, wrap);
      const measured = ratio(read, small, large);
      ratios.push(measured);
      return measured < MAX_RATIO;
    }),
    { seed: SEED, numRuns: SHAPES, examples: examples.map((example) => [example]) },
  );
  t.pass(`${ratios.length} shapes; ratios from ${Math.min(...ratios).toFixed(1)} to ${Math.max(...ratios).toFixed(1)}`);
}

const lineEnd = fc.constantFrom('\r\n', '\n', '\r');

t.test(`vCard: a body ${GROWTH} times as large takes less than ${MAX_RATIO} times as long`, async (t) => {
  // Runs of quoted-printable soft line breaks and folded continuations, which make one long value,
  // and mixes of them with blank lines, quotes, stray '=' and more cards.
  const continued = fc.constantFrom('ab=', '=', '=3D=', 'é=', ' folded', '\tfolded=');
  const other = fc.constantFrom('', 'x', ';', ':', '"', '\\,', 'BEGIN:VCARD', 'N;ENCODING=QUOTED-PRINTABLE:=');
  const pieces = fc.oneof(
    fc.array(continued, { minLength: 1, maxLength: 8 }),
    fc.array(fc.oneof(continued, other), { minLength: 1, maxLength: 8 }),
  );
  const unit = fc.tuple(pieces, lineEnd).map(([parts, end]) => parts.map((part) => part + end).join(''));
  const card = (repeated: string) => `BEGIN:VCARD\r\nFN:A B\r\nNOTE;ENCODING=QUOTED-PRINTABLE:=\r\n${repeated}\r\nEND:VCARD\r\n`;
  // The issue's own body first: a quoted-printable NOTE followed by ab=CRLF many times.
  linearIn(
    t,
    (body) => parseVcards(body, OPTIONS),
    unit,
    BASE.vcard,
    (repeated) => card(repeated).repeat(CARDS),
    ['ab=\r\n'],
  );
});

t.test(`CSV: a body ${GROWTH} times as large takes less than ${MAX_RATIO} times as long`, async (t) => {
  // Quotes, doubled quotes, commas, line breaks in and out of quotes, blanks, text after a closing quote.
  const piece = fc.constantFrom('"', '""', ',', '\r\n', '\n', '\r', ' ', 'a', '"a"x', '=1', "'");
  const unit = fc.tuple(fc.array(piece, { minLength: 1, maxLength: 8 }), lineEnd).map(([parts, end]) => parts.join('') + end);
  linearIn(
    t,
    (body) => parseCsv(body, OPTIONS),
    unit,
    BASE.csv,
    (repeated) => `first_name,last_name,email,phone,birthday\r\n${repeated}`,
  );
});
