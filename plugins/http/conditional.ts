import { createHash } from 'node:crypto';

/**
 * Entity tags of conditional requests (RFC 9110 §13.1): `*`, or the tags an If-Match or
 * If-None-Match header lists, as sent (`"…"` or `W/"…"`).
 */
export function listedTags(header: string): '*' | string[] {
  if (header.trim() === '*') return '*';
  return [...header.matchAll(/(?:W\/)?"[^"]*"/g)].map((match) => match[0]);
}

const opaque = (tag: string) => (tag.startsWith('W/') ? tag.slice(2) : tag);

/** If-None-Match: whether it names `etag`, comparing weakly (a `W/` prefix is ignored on either side). */
export function namesTag(ifNoneMatch: string, etag: string): boolean {
  const tags = listedTags(ifNoneMatch);
  return tags === '*' || tags.some((tag) => opaque(tag) === opaque(etag));
}

/** A weak tag of an answer: its body and the headers that describe it, so it changes whenever either would. */
export function weakTagOf(body: string, headers: Record<string, string | number>): string {
  const described = createHash('sha256').update(JSON.stringify(headers)).update('\n').update(body);
  return `W/"${described.digest('base64url').slice(0, 27)}"`;
}
