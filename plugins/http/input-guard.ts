/** JSON bodies nest at most this deep: deeper input only exhausts stacks further down. */
const MAX_DEPTH = 32;

/** Why PostgreSQL cannot store `text` (a NUL, or an unpaired UTF-16 surrogate), or null when it can. */
export function unstorableText(text: string): string | null {
  if (text.includes('\u0000')) return 'NUL characters';
  if (!text.isWellFormed()) return 'unpaired UTF-16 surrogates';
  return null;
}

/**
 * The first value in a request part that the database or the process cannot take, as a 422
 * `detail`: text PostgreSQL cannot store (see unstorableText) or nesting beyond MAX_DEPTH.
 * Walks iteratively, so hostile nesting cannot overflow the stack here either.
 */
export function unstorableInput(part: string, value: unknown): string | null {
  const pending: { value: unknown; path: string; depth: number }[] = [{ value, path: part, depth: 0 }];
  while (pending.length > 0) {
    const { value: current, path, depth } = pending.pop()!;
    if (typeof current === 'string') {
      const problem = unstorableText(current);
      if (problem) return `${path} must not contain ${problem}`;
      continue;
    }
    // Bytes (a raw body or a multipart file) are not text, and are no structure to walk.
    if (current === null || typeof current !== 'object' || current instanceof Uint8Array) continue;
    if (depth >= MAX_DEPTH) return `${path} must not nest more than ${MAX_DEPTH} levels deep`;
    const entries = Object.entries(current);
    for (const [key] of entries) {
      const problem = unstorableText(key);
      if (problem) return `${path} must not have keys with ${problem}`;
    }
    // Reversed, so the first offending value in document order is the one reported.
    for (const [key, child] of entries.reverse()) pending.push({ value: child, path: `${path}/${key}`, depth: depth + 1 });
  }
  return null;
}
