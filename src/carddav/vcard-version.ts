import { DavError, shortened } from './errors.js';
import { CARDDAV, DAV, type XmlElement } from './xml.js';

/*
 * The media type and vCard version a request asks a card in: `C:address-data`'s `content-type` and
 * `version` in a REPORT (RFC 6352 §10.4).
 */

/** The vCard versions the service stores and serves (`C:supported-address-data`). */
export const VCARD_VERSIONS = ['3.0', '4.0'] as const;
export type VcardVersion = (typeof VCARD_VERSIONS)[number];

const CARD_MEDIA_TYPE = 'text/vcard';

function refused(detail: string): DavError {
  return new DavError(403, detail, { ns: CARDDAV, name: 'supported-address-data' });
}

/**
 * The version the `C:address-data` of a REPORT body asks for: null when none is named (the card as
 * stored). A media type other than text/vcard, or a version other than 3.0 and 4.0, is 403
 * `C:supported-address-data` (RFC 6352 §8.6, §8.7).
 */
export function requestedVersion(body: XmlElement): VcardVersion | null {
  const prop = body.children.find((element) => element.ns === DAV && element.name === 'prop');
  const addressData = prop?.children.find((element) => element.ns === CARDDAV && element.name === 'address-data');
  if (!addressData) return null;
  const type = addressData.attributes['content-type'];
  if (type !== undefined && type.trim().toLowerCase() !== CARD_MEDIA_TYPE)
    throw refused(`address-data of type ${shortened(type)} cannot be produced: only ${CARD_MEDIA_TYPE}`);
  const version = addressData.attributes.version;
  if (version === undefined) return null;
  const known = VCARD_VERSIONS.find((candidate) => candidate === version.trim());
  if (!known) throw refused(`address-data of vCard version ${shortened(version)} cannot be produced: only 3.0 or 4.0`);
  return known;
}
