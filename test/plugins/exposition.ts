/** Reading the Prometheus text format in tests: each sample line with its labels and value. */

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: \d+)?$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

/** Every sample of an exposition; comments and blank lines skipped. */
export function parseExposition(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    const match = SAMPLE.exec(line);
    if (!match) continue;
    const labels: Record<string, string> = {};
    for (const [, name, value] of (match[2] ?? '').matchAll(LABEL))
      labels[name!] = value!.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
    samples.push({ name: match[1]!, labels, value: Number(match[3]) });
  }
  return samples;
}

/** The value of the sample `name` whose labels are exactly `labels`; 0 when there is none (a series not yet made). */
export function sampleValue(samples: Sample[], name: string, labels: Record<string, string>): number {
  const wanted = Object.entries(labels);
  const found = samples.find(
    (s) => s.name === name && Object.keys(s.labels).length === wanted.length && wanted.every(([key, value]) => s.labels[key] === value),
  );
  return found?.value ?? 0;
}
