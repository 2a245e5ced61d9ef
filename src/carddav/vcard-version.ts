import { type CardLine, foldedLine, parseCard } from '../contacts/formats/card.js';
import type { StoredCard } from '../contacts/cards.service.js';
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

/** One parameter of a content line: its upper-case name and its values as written (a bare 3.0 `CELL` is a TYPE). */
interface Parameter {
  name: string;
  values: string[];
}

/** The parameters of a line's prefix (`item1.TEL;TYPE=cell,voice;PREF=1`), split outside quotes. */
function parametersOf(prefix: string): { name: string; parameters: Parameter[] } {
  const parts: string[] = [];
  let start = 0;
  let quoted = false;
  for (let i = 0; i < prefix.length; i++) {
    if (prefix[i] === '"') quoted = !quoted;
    else if (prefix[i] === ';' && !quoted) {
      parts.push(prefix.slice(start, i));
      start = i + 1;
    }
  }
  parts.push(prefix.slice(start));
  const [name, ...rest] = parts;
  const parameters = rest.map((part): Parameter => {
    const equals = part.indexOf('=');
    if (equals < 0) return { name: 'TYPE', values: [part] };
    return { name: part.slice(0, equals).toUpperCase(), values: part.slice(equals + 1).split(',') };
  });
  return { name: name!, parameters };
}

function prefixOf(name: string, parameters: Parameter[]): string {
  return [name, ...parameters.filter((p) => p.values.length > 0).map((p) => `${p.name}=${p.values.join(',')}`)].join(';');
}

/** The media types 3.0 names by a bare subtype in TYPE, by property. */
const MEDIA_KIND: Record<string, string> = { PHOTO: 'image', LOGO: 'image', SOUND: 'audio', KEY: 'application' };
const BINARY = new Set(Object.keys(MEDIA_KIND));
/** Structured values and the components vCard 4.0 requires of them (RFC 6350 §6.2.2, §6.3.1). */
const COMPONENTS: Record<string, number> = { N: 5, ADR: 7 };
const TEL_NUMBER = /^\+?[0-9()\-. ]+$/;

function types(parameters: Parameter[]): string[] {
  return parameters.filter((p) => p.name === 'TYPE').flatMap((p) => p.values);
}

function withoutParameters(parameters: Parameter[], names: string[]): Parameter[] {
  return parameters.filter((p) => !names.includes(p.name));
}

/** A structured value with at least the components 4.0 requires (missing ones empty). */
function padded(value: string, count: number): string {
  let separators = 0;
  for (let i = 0; i < value.length; i++) {
    if (value[i] === '\\') i++;
    else if (value[i] === ';') separators++;
  }
  return separators + 1 >= count ? value : value + ';'.repeat(count - 1 - separators);
}

/** RFC 6350 §4.3.1: a basic-format date (and time) from the extended ISO 8601 form 3.0 cards use. */
function basicDate(value: string): string {
  const match = /^(\d{4})-(\d{2})-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2}))?(Z|[+-]\d{2}:?\d{2})?)?$/.exec(value.trim());
  if (!match) return value;
  const [, year, month, day, hour, minute, second, zone] = match;
  const time = hour === undefined ? '' : `T${hour}${minute}${second ?? ''}${(zone ?? '').replace(':', '')}`;
  return `${year}${month}${day}${time}`;
}

/** RFC 2426 §3.1.5: the extended date form 3.0 readers expect. */
function extendedDate(value: string): string {
  const match = /^(\d{4})(\d{2})(\d{2})(?:T(\d{2})(\d{2})(\d{2})?(Z|[+-]\d{4})?)?$/.exec(value.trim());
  if (!match) return value;
  const [, year, month, day, hour, minute, second, zone] = match;
  const time = hour === undefined ? '' : `T${hour}:${minute}${second === undefined ? '' : `:${second}`}${zone ?? ''}`;
  return `${year}-${month}-${day}${time}`;
}

/** One line of a 3.0 card as 4.0 writes it: prefix and value, or null to keep the line as written. */
function lineTo4(line: CardLine): { prefix: string; value: string } | null {
  const { name: fullName, parameters } = parametersOf(line.prefix);
  let params = parameters;
  let value = line.value;
  const typeValues = types(params);
  const pref = typeValues.some((type) => type.toUpperCase() === 'PREF');
  const kept = typeValues.filter((type) => !['PREF', 'INTERNET', 'X400'].includes(type.toUpperCase())).map((type) => type.toLowerCase());
  const retyped = (rest: Parameter[]) => [
    ...withoutParameters(rest, ['TYPE', 'CHARSET']),
    ...(kept.length > 0 ? [{ name: 'TYPE', values: kept }] : []),
    ...(pref ? [{ name: 'PREF', values: ['1'] }] : []),
  ];
  switch (line.name) {
    case 'VERSION':
      return { prefix: fullName, value: '4.0' };
    case 'TEL':
      params = retyped(params);
      if (TEL_NUMBER.test(value.trim())) {
        value = `tel:${value.trim().replace(/\s+/g, '-')}`;
        params = [...withoutParameters(params, ['VALUE']), { name: 'VALUE', values: ['uri'] }];
      }
      return { prefix: prefixOf(fullName, params), value };
    case 'EMAIL':
    case 'ADR':
    case 'URL':
    case 'IMPP':
      return {
        prefix: prefixOf(fullName, retyped(params)),
        value: line.name in COMPONENTS ? padded(value, COMPONENTS[line.name]!) : value,
      };
    case 'N':
      return { prefix: line.prefix, value: padded(value, COMPONENTS.N!) };
    case 'BDAY':
    case 'ANNIVERSARY':
      return { prefix: prefixOf(fullName, withoutParameters(params, ['VALUE'])), value: basicDate(value) };
  }
  if (BINARY.has(line.name)) {
    const encoding = params.find((p) => p.name === 'ENCODING')?.values[0]?.toUpperCase();
    if (encoding !== 'B' && encoding !== 'BASE64') return { prefix: prefixOf(fullName, withoutParameters(params, ['VALUE'])), value };
    const subtype = typeValues[0]?.toLowerCase() ?? 'octet-stream';
    const media = subtype.includes('/') ? subtype : `${MEDIA_KIND[line.name]}/${subtype}`;
    return {
      prefix: prefixOf(fullName, withoutParameters(params, ['ENCODING', 'TYPE', 'VALUE'])),
      value: `data:${media};base64,${value.trim()}`,
    };
  }
  return null;
}

/** One line of a 4.0 card as 3.0 writes it: prefix and value, or null to keep the line as written. */
function lineTo3(line: CardLine): { prefix: string; value: string } | null {
  const { name: fullName, parameters } = parametersOf(line.prefix);
  const pref = parameters.some((p) => p.name === 'PREF');
  const typeValues = types(parameters).map((type) => type.toUpperCase());
  const retyped = (rest: Parameter[]) => {
    const values = [...typeValues, ...(pref && !typeValues.includes('PREF') ? ['PREF'] : [])];
    return [...withoutParameters(rest, ['TYPE', 'PREF']), ...(values.length > 0 ? [{ name: 'TYPE', values }] : [])];
  };
  switch (line.name) {
    case 'VERSION':
      return { prefix: fullName, value: '3.0' };
    case 'TEL': {
      const uri = /^tel:/i.test(line.value.trim());
      const params = retyped(uri ? withoutParameters(parameters, ['VALUE']) : parameters);
      return { prefix: prefixOf(fullName, params), value: uri ? line.value.trim().slice(4) : line.value };
    }
    case 'EMAIL':
    case 'ADR':
    case 'URL':
    case 'IMPP':
      return { prefix: prefixOf(fullName, retyped(parameters)), value: line.value };
    case 'BDAY':
    case 'ANNIVERSARY':
      return { prefix: line.prefix, value: extendedDate(line.value) };
  }
  if (BINARY.has(line.name)) {
    const data = /^data:([^;,]+)?(;base64)?,(.*)$/is.exec(line.value.trim());
    if (data?.[2]) {
      const media = (data[1] ?? 'application/octet-stream').toLowerCase();
      const subtype = media.startsWith(`${MEDIA_KIND[line.name]}/`) ? media.split('/')[1]!.toUpperCase() : media;
      const params = [
        ...withoutParameters(parameters, ['VALUE', 'MEDIATYPE', 'TYPE']),
        { name: 'ENCODING', values: ['b'] },
        { name: 'TYPE', values: [subtype] },
      ];
      return { prefix: prefixOf(fullName, params), value: data[3]! };
    }
    return {
      prefix: prefixOf(fullName, [...withoutParameters(parameters, ['VALUE', 'MEDIATYPE']), { name: 'VALUE', values: ['uri'] }]),
      value: line.value,
    };
  }
  return null;
}

/**
 * `text` in vCard `version` (RFC 6352 §5.1.1: the server converts, as it advertises both in
 * `C:supported-address-data`): TEL types and `tel:` URIs, EMAIL types, PREF, PHOTO/LOGO/SOUND/KEY
 * as data URIs or `ENCODING=b`, BDAY and ANNIVERSARY date forms, N and ADR components. Other lines
 * are kept as written. A card already in `version` is returned as it is.
 */
export function inVersion(text: string, version: VcardVersion): string {
  const card = parseCard(text);
  const current = card.lines.find((line) => line.name === 'VERSION')?.value.trim();
  if (current === version) return text;
  const convert = version === '4.0' ? lineTo4 : lineTo3;
  const lines = card.lines.map((line) => {
    const converted = convert(line);
    return converted ? foldedLine(`${converted.prefix}:${converted.value}`, card.eol) : line.raw;
  });
  return lines.join('');
}

/** The version an `Accept` header asks a card in (`text/vcard; version=4.0`), or null when it names none this service produces. */
export function acceptedVersion(accept: string | undefined, stored: string): VcardVersion | null {
  if (accept === undefined) return null;
  const asked = accept
    .split(',')
    .map((range) => range.split(';').map((part) => part.trim()))
    .filter(([type]) => type?.toLowerCase() === CARD_MEDIA_TYPE)
    .flatMap(([, ...params]) => params.flatMap((param) => (/^version=/i.test(param) ? [param.slice(8).replace(/"/g, '').trim()] : [])));
  if (asked.length === 0 || asked.includes(stored)) return null;
  return VCARD_VERSIONS.find((version) => asked.includes(version)) ?? null;
}

/** `card` with its text in `version` (none: as stored); the tag stays the resource's. */
export function cardInVersion(card: StoredCard, version: VcardVersion | null): StoredCard {
  if (version === null || card.text === undefined) return card;
  const text = inVersion(card.text, version);
  return { ...card, text, octets: () => Buffer.byteLength(text) };
}

/** The version a card's text declares. */
export function storedVersion(text: string): string {
  return /(?:^|\n)VERSION:([^\r\n]*)/i.exec(text)?.[1]?.trim() ?? '';
}
