/** JSON bodies nest at most this deep: deeper input only exhausts stacks further down. */
const MAX_DEPTH = 32;

/** The character of `text` that PostgreSQL cannot store in `text` (a NUL, or an unpaired UTF-16 surrogate); null when there is none. */
export function unstorableCharacter(text: string): 'NUL character' | 'unpaired UTF-16 surrogate' | null {
  if (text.includes('\u0000')) return 'NUL character';
  return text.isWellFormed() ? null : 'unpaired UTF-16 surrogate';
}

/**
 * The first value in a request part that the database or the process cannot take, as a 422
 * `detail`: text PostgreSQL cannot store (see unstorableCharacter) or nesting beyond MAX_DEPTH.
 * Walks iteratively, so hostile nesting cannot overflow the stack here either.
 */
export function unstorableInput(part: string, value: unknown): string | null {
  const pending: { value: unknown; path: string; depth: number }[] = [{ value, path: part, depth: 0 }];
  while (pending.length > 0) {
    const { value: current, path, depth } = pending.pop()!;
    if (typeof current === 'string') {
      const character = unstorableCharacter(current);
      if (character) return `${path} must not contain ${character}s`;
      continue;
    }
    // Bytes (a raw body or a multipart file) are not text, and are no structure to walk.
    if (current === null || typeof current !== 'object' || current instanceof Uint8Array) continue;
    if (depth >= MAX_DEPTH) return `${path} must not nest more than ${MAX_DEPTH} levels deep`;
    const entries = Object.entries(current);
    for (const [key] of entries) {
      const character = unstorableCharacter(key);
      if (character) return `${path} must not have keys with ${character}s`;
    }
    // Reversed, so the first offending value in document order is the one reported.
    for (const [key, child] of entries.reverse()) pending.push({ value: child, path: `${path}/${key}`, depth: depth + 1 });
  }
  return null;
}
