import { DavError } from './errors.js';
import { key, type PropertySet, type PropertyValue, setResponse, type UserContext } from './multistatus.js';
import type { ResourceKind } from './resources.js';
import { DAV, type PropertyName, type XmlElement, type XmlNode, xmlText } from './xml.js';

/*
 * WebDAV ACL (RFC 3744) as a server whose ACLs cannot be changed offers it (RFC 6352 §3 asks for
 * RFC 3744): the ACL of each collection readable as `DAV:acl` (one protected grant to the owner),
 * `DAV:supported-privilege-set`, `DAV:acl-restrictions`, `DAV:principal-collection-set`, and the
 * four reports of §9 over the one principal a user can see, their own. The ACL method is refused.
 */

/** What each collection grants its owner (the same as its `DAV:current-user-privilege-set`). */
const GRANTED: Record<Exclude<ResourceKind, 'card'>, string[]> = {
  root: ['read'],
  principal: ['read'],
  home: ['read', 'write', 'write-content', 'bind', 'unbind'],
  book: ['read', 'write', 'write-content', 'bind', 'unbind'],
};

/** The ACL reports of RFC 3744 §9 by their root element. */
export const ACL_REPORTS = new Set([
  'acl-principal-prop-set',
  'principal-match',
  'principal-property-search',
  'principal-search-property-set',
]);
const ACL_REPORT_ELEMENTS = [...ACL_REPORTS].map((report) => ({ 'D:report': { [`D:${report}`]: '' } }));

const privilege = (name: string) => ({ 'D:privilege': { [`D:${name}`]: '' } });
const described = (name: string, description: string, children: XmlNode[] = [], abstract = false): XmlNode => ({
  ...privilege(name),
  ...(abstract ? { 'D:abstract': '' } : {}),
  'D:description': { '@xml:lang': 'en', '#text': description },
  ...(children.length > 0 ? { 'D:supported-privilege': children } : {}),
});

/** RFC 3744 §5.3: the privileges the service knows, as a tree under DAV:all. */
const SUPPORTED_PRIVILEGES: XmlNode = {
  'D:supported-privilege': described(
    'all',
    'Any operation',
    [
      described('read', 'Read the resource', [
        described('read-acl', 'Read the ACL'),
        described('read-current-user-privilege-set', 'Read the current user privilege set'),
      ]),
      described('write', 'Write the resource', [
        described('write-properties', 'Write properties'),
        described('write-content', 'Write the content'),
        described('bind', 'Add a member'),
        described('unbind', 'Remove a member'),
      ]),
      described('write-acl', 'Change the ACL'),
    ],
    true,
  ),
};

/**
 * A collection's properties with the ACL properties added: its `DAV:acl` (RFC 3744 §5.5, one
 * protected ACE granting the owner what it may do), the supported privileges (§5.3), the
 * restrictions (§5.6: grant only, no invert) and the principal collection set (§5.8: the user's own
 * principal, the one principal the user can see; naming `/dav/principals/` would offer to list others).
 */
export function withAclProperties(set: PropertySet, kind: Exclude<ResourceKind, 'card'>, user: UserContext): PropertySet {
  const values = new Map(set.values);
  const entries: [PropertyName, PropertyValue][] = [
    [
      { ns: DAV, name: 'acl' },
      () => ({
        'D:ace': {
          'D:principal': { 'D:href': xmlText(user.principalHref) },
          'D:grant': { 'D:privilege': GRANTED[kind].map((name) => ({ [`D:${name}`]: '' })) },
          'D:protected': '',
        },
      }),
    ],
    [{ ns: DAV, name: 'supported-privilege-set' }, () => SUPPORTED_PRIVILEGES],
    [{ ns: DAV, name: 'acl-restrictions' }, () => ({ 'D:grant-only': '', 'D:no-invert': '' })],
    [{ ns: DAV, name: 'principal-collection-set' }, () => ({ 'D:href': xmlText(user.principalHref) })],
  ];
  for (const [name, value] of entries) if (!values.has(key(name))) values.set(key(name), value);
  // RFC 3253 §3.1.5: the reports of §9 are supported here, so they are advertised beside any others.
  const reportSet = key({ ns: DAV, name: 'supported-report-set' });
  const others = values.get(reportSet);
  values.set(reportSet, () => {
    const listed = others?.() as XmlNode | undefined;
    const before = listed?.['D:supported-report'] ?? [];
    return { 'D:supported-report': [...(Array.isArray(before) ? before : [before]), ...ACL_REPORT_ELEMENTS] };
  });
  return { values, allprop: set.allprop };
}

/** Bounds of a principal-property-search: each is tested against the principal's properties. */
const MAX_PROPERTY_SEARCHES = 32;
const MAX_MATCH_CHARS = 1024;

/** The principal's properties a principal-property-search can test (RFC 3744 §9.5). */
const SEARCHABLE = [{ ns: DAV, name: 'displayname', description: 'Display name' }];

/**
 * One of the ACL reports on a resource whose ACL names only the user's own principal: the answer,
 * a multistatus of the principal's response (or none) or, for principal-search-property-set, its
 * own document (§9.5). Depth must be 0 (§9.2, §9.3, §9.5): 400 otherwise.
 */
export function aclReport(
  body: XmlElement,
  depth: string | null,
  user: UserContext,
  principal: PropertySet,
  wanted: Parameters<typeof setResponse>[2],
): { multistatus: XmlNode[] } | { document: XmlNode } {
  if (depth !== null && depth !== '0') throw new DavError(400, `${body.name} takes Depth 0`);
  const principalResponse = [setResponse(user.principalHref, principal, wanted)];
  switch (body.name) {
    case 'acl-principal-prop-set':
      // §9.2: each principal of the resource's ACL: the owner's principal alone.
      return { multistatus: principalResponse };
    case 'principal-match': {
      // §9.3: `D:self` matches the user's principal; a principal-property match is by the owner.
      const self = body.children.some((element) => element.ns === DAV && element.name === 'self');
      return { multistatus: self ? principalResponse : [] };
    }
    case 'principal-property-search': {
      const searches = body.children.filter((element) => element.ns === DAV && element.name === 'property-search');
      if (searches.length > MAX_PROPERTY_SEARCHES)
        throw new DavError(400, `The report holds ${searches.length} property-searches: at most ${MAX_PROPERTY_SEARCHES}`);
      const allOf = body.attributes.test === 'allof';
      const results = searches.map((search) => {
        const match = search.children.find((element) => element.ns === DAV && element.name === 'match')?.text ?? '';
        if (match.length > MAX_MATCH_CHARS) throw new DavError(400, `A match holds ${match.length} characters: at most ${MAX_MATCH_CHARS}`);
        const names = search.children.find((element) => element.ns === DAV && element.name === 'prop')?.children ?? [];
        // Case-insensitive substring, as §9.4 suggests; a property not searchable matches nothing.
        return names.some(
          (name) =>
            SEARCHABLE.some((searchable) => searchable.ns === name.ns && searchable.name === name.name) &&
            user.username.toLowerCase().includes(match.toLowerCase()),
        );
      });
      const matched = results.length > 0 && (allOf ? results.every(Boolean) : results.some(Boolean));
      return { multistatus: matched ? principalResponse : [] };
    }
    default:
      return {
        document: {
          'D:principal-search-property': SEARCHABLE.map(({ name, description }) => ({
            'D:prop': { [`D:${name}`]: '' },
            'D:description': { '@xml:lang': 'en', '#text': description },
          })),
        },
      };
  }
}

/**
 * RFC 3744 §8.1.1: every ACE here is protected, so any ACL request conflicts with one:
 * 403 `DAV:no-protected-ace-conflict`.
 */
export function refuseAclChange(kind: ResourceKind): never {
  throw new DavError(403, `The ACL of this ${kind} cannot be changed: its one ACE is protected`, {
    ns: DAV,
    name: 'no-protected-ace-conflict',
  });
}
