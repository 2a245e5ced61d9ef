import { createHash } from 'node:crypto';
import addFormats from 'ajv-formats';
import { unstorableInput } from '../../plugins/http/input-guard.js';
import { additionalDataOf } from './formats/entries.js';
import {
  type Card,
  CardError,
  cardText,
  checkSingleCard,
  componentsOf,
  contentLine,
  escapeValue,
  firstLine,
  parseCard,
  unescapeValue,
} from './formats/card.js';
import { vcardOf } from './formats/vcard.js';
import { stripPhoneSeparators } from './filter.js';
import type { components } from '../generated/openapi.js';

/*
 * The mapping between a vCard and a contact's fields (docs/carddav.md, "Cards and contacts"): what a
 * card a client stores says about the contact, how a REST write rewrites a stored card (only the
 * mapped properties), and the card of a contact written only over REST.
 */

type Contact = components['schemas']['Contact'];

const E164 = /^\+[1-9][0-9]{6,14}$/;
const EMAIL = addFormats.default.get('email', 'full') as RegExp;
const EMAIL_MAX = 254;
const NAME_MAX = 50;
/** A UID is unique per owner by a btree index, whose entries hold at most about 2.7 kB. */
const UID_MAX_OCTETS = 1024;
const EARLIEST_BIRTHDAY = '1900-01-01';
const ADDITIONAL_DATA_MAX_BYTES = 16 * 1024;
// eslint-disable-next-line no-control-regex -- these are exactly the characters to find
const CONTROL = /[\u0000-\u0008\u000A-\u001F\u007F]/;
const UUID = /^([0-9a-f]{8})-([0-9a-f]{4})-([0-9a-f]{4})-([0-9a-f]{4})-([0-9a-f]{12})$/;

/** Why a card is refused, by the CardDAV precondition it breaks (RFC 6352 §6.3.2.1). */
export class CardRefused extends Error {
  constructor(
    readonly precondition: 'valid-address-data' | 'supported-address-data',
    detail: string,
  ) {
    super(detail);
  }
}

/** The tag of a derived UUID: the first 7 bytes of SHA-256 over a fixed label and the id. */
function derivedTag(id: number): Buffer {
  return createHash('sha256').update(`contacts-service card ${id}`).digest().subarray(0, 7);
}

/**
 * The UUID of a contact that has no UID of its own (one written only over REST): an RFC 9562
 * version 8 UUID holding the id in its last 4 bytes and a hash of it in the first 7, so it can be
 * computed and recognised without storing it. No row stores it: a REST create writes nothing more.
 */
export function derivedUuid(id: number): string {
  const bytes = Buffer.alloc(16);
  derivedTag(id).copy(bytes, 0);
  bytes[6] = 0x80 | (bytes[6]! & 0x0f);
  bytes[8] = 0x80;
  bytes.writeUInt32BE(id, 12);
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** The contact id a derived UUID stands for, or null when `uuid` is no derived one. */
export function idOfDerivedUuid(uuid: string): number | null {
  const match = UUID.exec(uuid);
  if (!match) return null;
  const bytes = Buffer.from(match.slice(1).join(''), 'hex');
  const id = bytes.readUInt32BE(12);
  return id > 0 && id <= 2_147_483_647 && derivedUuid(id) === uuid ? id : null;
}

/** The UID of a contact without one of its own. */
export function derivedUid(id: number): string {
  return `urn:uuid:${derivedUuid(id)}`;
}

/** The contact id a UID derived by derivedUid stands for, or null. */
export function idOfDerivedUid(uid: string): number | null {
  return uid.startsWith('urn:uuid:') ? idOfDerivedUuid(uid.slice('urn:uuid:'.length)) : null;
}

/** The resource name of a contact whose client chose none: `{uuid}.vcf`. */
export function derivedCardName(id: number): string {
  return `${derivedUuid(id)}.vcf`;
}

/** The contact id a derived resource name stands for, or null. */
export function idOfDerivedCardName(name: string): number | null {
  return name.endsWith('.vcf') ? idOfDerivedUuid(name.slice(0, -'.vcf'.length)) : null;
}

/** The card of a contact written only over REST: the export form, with its UID after VERSION. */
export function renderedCard(contact: Contact): string {
  const exported = vcardOf(contact);
  const version = 'VERSION:4.0\r\n';
  const at = exported.indexOf(version) + version.length;
  return `${exported.slice(0, at)}UID:${escapeValue(derivedUid(contact.id))}\r\n${exported.slice(at)}`;
}

/** What a card says about its contact; `emails` are every valid address in order (the first one free becomes `email`). */
export interface CardFields {
  first_name: string;
  last_name: string;
  emails: string[];
  phone: string | null;
  birthday: string | null;
  additional_data: Record<string, unknown> | null;
}

export interface ReadCard {
  uid: string;
  fields: CardFields;
}

function utcDate(moment: Date): string {
  return moment.toISOString().slice(0, 10);
}

/** Whether `text` is a real calendar date `YYYY-MM-DD`. */
function isCalendarDate(text: string): boolean {
  const date = new Date(`${text}T00:00:00Z`);
  return !Number.isNaN(date.getTime()) && date.toISOString().slice(0, 10) === text;
}

/** `YYYYMMDD` or `YYYY-MM-DD` as `YYYY-MM-DD` when it is a birthday the REST rule takes on `today`; else null. */
function birthdayOf(value: string, today: string): string | null {
  const text = value.trim();
  const date = /^\d{8}$/.test(text) ? `${text.slice(0, 4)}-${text.slice(4, 6)}-${text.slice(6)}` : text;
  if (!/^\d{4}-\d{2}-\d{2}$/.test(date) || !isCalendarDate(date)) return null;
  return date >= EARLIEST_BIRTHDAY && date < today ? date : null;
}

/** A TEL value as E.164, or null: a `tel:` URI loses its scheme, then the REST phone rule. */
function phoneOf(value: string): string | null {
  const phone = stripPhoneSeparators(unescapeValue(value).trim().replace(/^tel:/i, ''));
  return E164.test(phone) ? phone : null;
}

function emailOf(value: string): string | null {
  const email = unescapeValue(value)
    .trim()
    .replace(/^mailto:/i, '');
  return email.length <= EMAIL_MAX && EMAIL.test(email) ? email : null;
}

/**
 * X-ADDITIONAL-DATA as `additional_data`: null when it is no JSON object or over 16 KiB (the line
 * stays in the card); CardRefused when it is one that REST would refuse to take back (nested over
 * 32 levels counting the body, a NUL or an unpaired surrogate), since a REST client sending the contact back would
 * get 422 and PostgreSQL's jsonb cannot hold the latter.
 */
function additionalDataFrom(value: string): Record<string, unknown> | null {
  const parsed = additionalDataOf(unescapeValue(value));
  if ('detail' in parsed || parsed.value === null) return null;
  // Counted as REST counts it: the data is one level inside the body.
  const unstorable = unstorableInput(ADDITIONAL_DATA_LINE, { additional_data: parsed.value });
  // The path to the value is the client's keys: the sentence names the line, not the path.
  if (unstorable)
    throw new CardRefused('valid-address-data', ADDITIONAL_DATA_LINE + unstorable.slice(unstorable.lastIndexOf(' must not ')));
  return Buffer.byteLength(JSON.stringify(parsed.value)) <= ADDITIONAL_DATA_MAX_BYTES ? parsed.value : null;
}

const ADDITIONAL_DATA_LINE = 'X-ADDITIONAL-DATA';

/** First and last name from N (family;given;…) when either is set; else FN split at its last blank. */
function namesOf(card: Card): { first_name: string; last_name: string } {
  const n = firstLine(card, 'N');
  if (n) {
    const [family = '', given = ''] = componentsOf(n.value).map((component) => unescapeValue(component).trim());
    if (family !== '' || given !== '') return { first_name: given, last_name: family };
  }
  const full = unescapeValue(firstLine(card, 'FN')?.value ?? '').trim();
  const cut = full.search(/\s\S*$/);
  return cut < 0 ? { first_name: full, last_name: '' } : { first_name: full.slice(0, cut).trimEnd(), last_name: full.slice(cut + 1) };
}

/**
 * Reads a card a client PUT: exactly one vCard 3.0 or 4.0 with a UID and a name, each name part at
 * most 50 characters, a UID of at most 1024 octets, no NUL (PostgreSQL text cannot hold one).
 * Throws CardRefused otherwise. `now` decides which birthdays are in the past.
 */
export function readCard(text: string, now: Date): ReadCard {
  if (text.includes('\u0000')) throw new CardRefused('valid-address-data', 'Not one well-formed vCard: it holds a NUL character');
  let card: Card;
  try {
    card = parseCard(text);
    checkSingleCard(card);
  } catch (error) {
    if (error instanceof CardError) throw new CardRefused('valid-address-data', `Not one well-formed vCard: ${error.message}`);
    throw error;
  }
  // RFC 6350 §6.7.6: UID's cardinality is *1.
  if (card.lines.filter((line) => line.name === 'UID').length > 1)
    throw new CardRefused('valid-address-data', 'Not one well-formed vCard: it holds more than one UID');
  // RFC 6350 §3.3: a value holds no control character but tab (VALUE-CHAR, and parameters likewise).
  const controlled = card.lines.find((line) => CONTROL.test(line.prefix) || CONTROL.test(line.value));
  if (controlled) throw new CardRefused('valid-address-data', `Not one well-formed vCard: ${controlled.name} holds a control character`);
  const version = firstLine(card, 'VERSION')?.value.trim();
  if (version === undefined) throw new CardRefused('valid-address-data', 'The vCard has no VERSION');
  if (version !== '3.0' && version !== '4.0')
    throw new CardRefused('supported-address-data', `vCard version ${version} is not supported (3.0 or 4.0)`);
  const uid = unescapeValue(firstLine(card, 'UID')?.value ?? '').trim();
  if (uid === '') throw new CardRefused('valid-address-data', 'The vCard has no UID');
  if (Buffer.byteLength(uid) > UID_MAX_OCTETS)
    throw new CardRefused('valid-address-data', `The UID is longer than ${UID_MAX_OCTETS} octets`);
  const names = namesOf(card);
  if (names.first_name === '' && names.last_name === '') throw new CardRefused('valid-address-data', 'The vCard has no name (FN or N)');
  for (const field of ['first_name', 'last_name'] as const) {
    if ([...names[field]].length > NAME_MAX)
      throw new CardRefused('valid-address-data', `${field} must NOT have more than ${NAME_MAX} characters`);
  }
  const today = utcDate(now);
  const emails: string[] = [];
  let phone: string | null = null;
  let birthday: string | null = null;
  let additionalData: Record<string, unknown> | null | undefined;
  for (const line of card.lines) {
    if (line.name === 'EMAIL') {
      const email = emailOf(line.value);
      if (email !== null) emails.push(email);
    } else if (line.name === 'TEL') phone ??= phoneOf(line.value);
    else if (line.name === 'BDAY') birthday ??= birthdayOf(line.value, today);
    else if (line.name === 'X-ADDITIONAL-DATA' && additionalData === undefined) additionalData = additionalDataFrom(line.value);
  }
  return { uid, fields: { ...names, emails, phone, birthday, additional_data: additionalData ?? null } };
}

/** The fields a REST write changed, with their new values (a PATCH carries any subset). */
export type WrittenFields = Partial<Pick<Contact, 'first_name' | 'last_name' | 'email' | 'phone' | 'birthday' | 'additional_data'>>;

/**
 * A stored card after a REST write: only the mapped properties change. `N`'s family and given
 * components and `FN` follow the names; the property each other field was read from (the first
 * EMAIL holding the old address, the first TEL holding the old number, the first BDAY holding the
 * old date, X-ADDITIONAL-DATA) is replaced in place, added before END when there was none, and
 * X-ADDITIONAL-DATA is removed when the data becomes null. Every other line stays as written.
 */
export function rewriteCard(text: string, before: Contact, written: WrittenFields, now: Date): string {
  const card = parseCard(text);
  const today = utcDate(now);
  const after = { ...before, ...written };
  const lines = [...card.lines];
  const replaceOrAdd = (index: number, prefix: string, value: string) => {
    const line = contentLine(card, prefix, value);
    if (index >= 0) lines[index] = line;
    else lines.splice(lines.length - 1, 0, line);
  };
  if (written.first_name !== undefined || written.last_name !== undefined) {
    const n = lines.findIndex((line) => line.name === 'N');
    const components = n >= 0 ? componentsOf(lines[n]!.value) : ['', '', '', '', ''];
    components[0] = escapeValue(after.last_name);
    components[1] = escapeValue(after.first_name);
    replaceOrAdd(n, n >= 0 ? lines[n]!.prefix : 'N', components.join(';'));
    const fn = lines.findIndex((line) => line.name === 'FN');
    replaceOrAdd(fn, fn >= 0 ? lines[fn]!.prefix : 'FN', escapeValue(`${after.first_name} ${after.last_name}`.trim()));
  }
  if (written.email !== undefined && written.email !== null) {
    const old = before.email?.toLowerCase();
    const at = old === undefined ? -1 : lines.findIndex((line) => line.name === 'EMAIL' && emailOf(line.value)?.toLowerCase() === old);
    replaceOrAdd(at, at >= 0 ? lines[at]!.prefix : 'EMAIL', escapeValue(written.email));
  }
  if (written.phone !== undefined && written.phone !== null) {
    const at = before.phone === null ? -1 : lines.findIndex((line) => line.name === 'TEL' && phoneOf(line.value) === before.phone);
    // A new TEL in the card's own version: vCard 3.0 (RFC 2426 §3.3.1) has no tel: URI value.
    const version3 = lines.find((line) => line.name === 'VERSION')?.value.trim() === '3.0';
    const asUri = at >= 0 ? /^tel:/i.test(lines[at]!.value.trim()) : !version3;
    replaceOrAdd(at, at >= 0 ? lines[at]!.prefix : asUri ? 'TEL;VALUE=uri' : 'TEL', `${asUri ? 'tel:' : ''}${written.phone}`);
  }
  if (written.birthday !== undefined && written.birthday !== null) {
    const at =
      before.birthday === null ? -1 : lines.findIndex((line) => line.name === 'BDAY' && birthdayOf(line.value, today) === before.birthday);
    const dashed = at >= 0 && lines[at]!.value.includes('-');
    replaceOrAdd(at, at >= 0 ? lines[at]!.prefix : 'BDAY', dashed ? written.birthday : written.birthday.replaceAll('-', ''));
  }
  if (written.additional_data !== undefined) {
    const at = lines.findIndex((line) => line.name === 'X-ADDITIONAL-DATA');
    if (written.additional_data === null) {
      if (at >= 0) lines.splice(at, 1);
    } else {
      replaceOrAdd(at, at >= 0 ? lines[at]!.prefix : 'X-ADDITIONAL-DATA', escapeValue(JSON.stringify(written.additional_data)));
    }
  }
  return cardText({ lines, eol: card.eol });
}
