/*
 * The resources of the CardDAV face (docs/carddav.md, "Paths"): the root, the user's principal, the
 * address-book home and its one book, and the cards in it. Another user's paths are no resource.
 */

export type Resource = { kind: 'root' } | { kind: 'principal' } | { kind: 'home' } | { kind: 'book' } | { kind: 'card'; name: string };

export type ResourceKind = Resource['kind'];

/** The longest resource name a client may choose, in octets. */
const MAX_NAME_OCTETS = 255;

/** The path segments after `/dav`, percent-decoded; null when one does not decode. A trailing slash adds nothing. */
export function davSegments(url: string): string[] | null {
  const path = url.split('?', 1)[0]!.replace(/^\/dav/, '');
  try {
    return path
      .split('/')
      .filter((segment) => segment !== '')
      .map((segment) => decodeURIComponent(segment));
  } catch {
    return null;
  }
}

/** The kind of resource a path names by its shape alone, whoever asks (OPTIONS needs no credentials). */
export function kindByShape(segments: readonly string[]): ResourceKind | null {
  if (segments.length === 0) return 'root';
  if (segments[0] === 'principals' && segments.length === 2) return 'principal';
  if (segments[0] !== 'addressbooks') return null;
  if (segments.length === 2) return 'home';
  if (segments[2] !== 'contacts') return null;
  if (segments.length === 3) return 'book';
  return segments.length === 4 && isCardName(segments[3]!) ? 'card' : null;
}

/** C0 controls and DEL: no name holds one (PostgreSQL text cannot hold NUL at all). */
// eslint-disable-next-line no-control-regex -- these are exactly the characters to find
const CONTROL = /[\u0000-\u001F\u007F]/;

/** Whether a decoded path segment holds a control character (the face answers 400). */
export function hasControlCharacter(segment: string): boolean {
  return CONTROL.test(segment);
}

/** A slash or backslash, percent-encoded into one segment: `..%2F..%2Fx.vcf` would name a path, not a resource. */
const SEPARATOR = /[/\\]/;

/** Whether a decoded path segment holds a path separator (the face answers 400). */
export function hasSeparator(segment: string): boolean {
  return SEPARATOR.test(segment);
}

function isCardName(name: string): boolean {
  const octets = Buffer.byteLength(name);
  return octets >= 1 && octets <= MAX_NAME_OCTETS && name !== '.' && name !== '..' && !hasControlCharacter(name) && !hasSeparator(name);
}

/** The resource `segments` name for user `userId`, or null (a path of no resource, or of another user: 404). */
export function resolve(segments: readonly string[], userId: number): Resource | null {
  const kind = kindByShape(segments);
  if (kind === null) return null;
  if (kind !== 'root' && segments[1] !== String(userId)) return null;
  return kind === 'card' ? { kind, name: segments[3]! } : { kind };
}

/** Whether `segments` lie in user `userId`'s own space: under their principal or their home. */
export function isOwnSpace(segments: readonly string[], userId: number): boolean {
  return (segments[0] === 'principals' || segments[0] === 'addressbooks') && segments[1] === String(userId);
}

/** The methods each kind of resource answers (`Allow`); a path of no resource answers OPTIONS and PROPFIND. */
export const ALLOWED: Record<ResourceKind | 'other', string[]> = {
  root: ['OPTIONS', 'PROPFIND', 'REPORT'],
  principal: ['OPTIONS', 'PROPFIND', 'REPORT'],
  home: ['OPTIONS', 'PROPFIND', 'REPORT'],
  book: ['OPTIONS', 'PROPFIND', 'REPORT'],
  card: ['OPTIONS', 'GET', 'HEAD', 'PUT', 'DELETE', 'PROPFIND', 'REPORT', 'COPY', 'MOVE'],
  other: ['OPTIONS', 'PROPFIND'],
};

/** Absolute, percent-encoded hrefs (collections end in `/`). */
export const hrefs = {
  root: () => '/dav/',
  principal: (userId: number) => `/dav/principals/${userId}/`,
  home: (userId: number) => `/dav/addressbooks/${userId}/`,
  book: (userId: number) => `/dav/addressbooks/${userId}/contacts/`,
  card: (userId: number, name: string) => `/dav/addressbooks/${userId}/contacts/${encodeURIComponent(name)}`,
};

/** The href of `resource` for user `userId`. */
export function hrefOf(resource: Resource, userId: number): string {
  return resource.kind === 'card'
    ? hrefs.card(userId, resource.name)
    : resource.kind === 'root'
      ? hrefs.root()
      : hrefs[resource.kind](userId);
}

/** The card name an href in a request names in user `userId`'s book, or null (another book, or no card). */
export function cardNameOfHref(href: string, userId: number): string | null {
  let path = href.trim();
  try {
    path = new URL(path, 'http://host').pathname;
  } catch {
    return null;
  }
  if (!path.startsWith('/dav/')) return null;
  const segments = davSegments(path);
  if (!segments) return null;
  const resource = resolve(segments, userId);
  return resource?.kind === 'card' ? resource.name : null;
}
