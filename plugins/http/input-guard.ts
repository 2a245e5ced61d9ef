/** JSON bodies nest at most this deep: deeper input only exhausts stacks further down. */
export const MAX_DEPTH = 32;

/**
 * The first value in a request part that the database or the process cannot take, as a 422
 * `detail`: a NUL character (PostgreSQL text cannot hold one) or nesting beyond MAX_DEPTH.
 * Walks iteratively, so hostile nesting cannot overflow the stack here either.
 */
export function unstorableInput(part: string, value: unknown): string | null {
  const pending: { value: unknown; path: string; depth: number }[] = [{ value, path: part, depth: 0 }];
  while (pending.length > 0) {
    const { value: current, path, depth } = pending.pop()!;
    if (typeof current === 'string') {
      if (current.includes('\u0000')) return `${path} must not contain NUL characters`;
      continue;
    }
    if (current === null || typeof current !== 'object') continue;
    if (depth >= MAX_DEPTH) return `${path} must not nest more than ${MAX_DEPTH} levels deep`;
    const entries = Object.entries(current);
    for (const [key] of entries) {
      if (key.includes('\u0000')) return `${path} must not have keys with NUL characters`;
    }
    // Reversed, so the first offending value in document order is the one reported.
    for (const [key, child] of entries.reverse()) pending.push({ value: child, path: `${path}/${key}`, depth: depth + 1 });
  }
  return null;
}
