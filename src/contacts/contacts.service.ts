import type { FastifyInstance } from 'fastify';
import { listedTags } from '../../plugins/http/conditional.js';
import { BadRequest, Conflict, NotFound, PreconditionFailed, ValidationFailed } from '../../plugins/http/errors.js';
import type { components } from '../generated/openapi.js';
import { type IdempotencyDeps, type KeyedRequest, writeOnce } from '../idempotency/idempotency.service.js';
import type { OperationResult } from '../operation-types.js';
import { birthdayWindow } from './birthdays.js';
import { rewriteCard } from './cards.js';
import * as repository from './contacts.repository.js';
import { CONTACT_COLUMNS, type ContactFields, type ContactRow, type PageOf, type PageRequest } from './contacts.repository.js';
import { schemaFields } from '../generated/schemas.js';
import { type Condition, FilterError, parseFilter, stripPhoneSeparators } from './filter.js';
import { PROMOTION_CHECK_EVERY } from './large-owners.js';
import { parseSort, SortError, type SortKey } from './sort.js';

export type Contact = components['schemas']['Contact'];
type ContactCreate = components['schemas']['ContactCreate'];
type ContactPatch = components['schemas']['ContactPatch'];

/** What the contacts service needs from the app (`config` for CONTACTS_MAX_PER_USER). */
export type ContactsDeps = Pick<FastifyInstance, 'db' | 'replicas' | 'cache' | 'now' | 'config' | 'largeOwners'>;

/**
 * Where a read of the owner's contacts runs. 'own-writes': on a standby that has replayed every
 * write the owner was answered for (app.replicas, docs/performance.md "Read replicas"), else on the
 * primary. 'latest': on the primary, for a read that decides a write or goes with a sync token
 * (a token must never be ahead of the rows it comes with).
 */
export type Freshness = 'own-writes' | 'latest';

/** Runs `read` where `freshness` allows. */
export function readingOwner<T>(
  deps: Pick<ContactsDeps, 'db' | 'replicas'>,
  ownerId: number,
  freshness: Freshness,
  read: (db: ContactsDeps['db']) => Promise<T>,
): Promise<T> {
  return freshness === 'latest' ? read(deps.db) : deps.replicas.reading(ownerId, read);
}

const ADDITIONAL_DATA_MAX_BYTES = 16 * 1024;
const E164 = /^\+[1-9][0-9]{6,14}$/;
const EARLIEST_BIRTHDAY = '1900-01-01';
const NOT_FOUND = 'Contact not found';
export const DUPLICATE_EMAIL = 'Contact with this email already exists';
const CHANGED = 'Precondition Failed: the contact has changed';
/** A row's values as the API writes them: instants as millisecond UTC ISO strings. */
type AsApi<Row> = { [K in keyof Row]: Row[K] extends Date ? string : Row[K] };

/**
 * The API shape of a row. Its columns are the Contact's properties (CONTACT_COLUMNS), and tsc checks
 * that each column's value fits the API's field once instants are strings.
 */
export function toContact(row: ContactRow): Contact {
  const contact = Object.fromEntries(
    CONTACT_COLUMNS.map((column) => [column, row[column] instanceof Date ? row[column].toISOString() : row[column]]),
  );
  return contact as AsApi<ContactRow>;
}

/**
 * The field rules openapi.yaml states in words but a schema cannot check: the phone is E.164 once
 * separators are gone, the birthday is from 1900-01-01 to yesterday (UTC), and `additional_data` is
 * at most 16 KiB as JSON. Applies to the fields present; returns them with the phone normalised.
 */
export function applyContactRules<T extends ContactFields>(fields: T, now: Date): T {
  const checked = { ...fields };
  if (fields.phone != null) {
    const phone = stripPhoneSeparators(fields.phone);
    if (!E164.test(phone)) throw new ValidationFailed('body/phone must be an international number in E.164 form, like +14155550123');
    checked.phone = phone;
  }
  if (fields.birthday != null) {
    if (fields.birthday < EARLIEST_BIRTHDAY) throw new ValidationFailed(`body/birthday must not be before ${EARLIEST_BIRTHDAY}`);
    if (fields.birthday >= utcDate(now)) throw new ValidationFailed('body/birthday must be before today');
  }
  if (fields.additional_data != null && jsonBytes(fields.additional_data) > ADDITIONAL_DATA_MAX_BYTES) {
    throw new ValidationFailed('body/additional_data must be at most 16 KiB as JSON');
  }
  return checked;
}

/** Size of `value` as JSON; 422 when it nests too deeply for JSON.stringify (a RangeError, not a 500). */
function jsonBytes(value: unknown): number {
  try {
    return Buffer.byteLength(JSON.stringify(value));
  } catch (error) {
    if (error instanceof RangeError) throw new ValidationFailed('body/additional_data is nested too deeply');
    throw error;
  }
}

/** The writable fields of a request body (openapi.yaml's ContactPatch); read-only ones (`id`, `created_at`, `updated_at`) are dropped. */
export function writableFields(body: ContactPatch): ContactFields {
  const fields: ContactFields = {};
  for (const key of schemaFields.ContactPatch.writable) {
    if (body[key] !== undefined) Object.assign(fields, { [key]: body[key] });
  }
  return fields;
}

function utcDate(moment: Date): string {
  return moment.toISOString().slice(0, 10);
}

/** Runs a write, turning the e-mail uniqueness index's refusal (a plain duplicate or a lost race) into a 409. */
async function writing<T>(write: () => Promise<T>): Promise<T> {
  try {
    return await write();
  } catch (error) {
    if (repository.isDuplicateEmail(error)) throw new Conflict(DUPLICATE_EMAIL);
    throw error;
  }
}

/** A create past CONTACTS_MAX_PER_USER: 409 on /api, 507 on /dav (docs/carddav.md). Nothing was written. */
export class ContactQuotaExceeded extends Conflict {}

/** Words the 409 from the contacts the owner had and the create's. */
type Refusal = (max: number, had: number, adding: number) => string;

const contactLimit: Refusal = (max) => `Contact limit reached: a user may have at most ${max} contacts`;

/** The owner's quota refusing `run`'s create (repository.OverQuota) as ContactQuotaExceeded. */
async function refusingOverQuota<T>(deps: ContactsDeps, run: (max: number) => Promise<T>, refusal: Refusal): Promise<T> {
  const max = deps.config.contactsMaxPerUser;
  try {
    return await run(max);
  } catch (error) {
    if (error instanceof repository.OverQuota) throw new ContactQuotaExceeded(refusal(max, error.had, error.adding));
    throw error;
  }
}

/**
 * Runs `create` within the owner's quota (repository.creatingWithin) through `db` (the pool, or a
 * transaction to run in): exact, as one owner's creates lock the owner's address book in turn.
 */
export async function withinQuota<T>(
  deps: ContactsDeps,
  db: ContactsDeps['db'],
  ownerId: number,
  create: (db: ContactsDeps['db']) => Promise<{ result: T; added: number }>,
  refusal: Refusal = contactLimit,
): Promise<T> {
  return refusingOverQuota(deps, (max) => repository.creatingWithin(db, ownerId, max, create), refusal);
}

/** Creates one contact by `insert` within the owner's quota, through `db` (repository.creatingOne). */
function oneWithinQuota<T>(
  deps: ContactsDeps,
  db: ContactsDeps['db'],
  ownerId: number,
  insert: (db: ContactsDeps['db']) => Promise<T>,
): Promise<T> {
  return refusingOverQuota(deps, (max) => repository.creatingOne(db, ownerId, max, insert), contactLimit);
}

/**
 * After a committed write: the owner's reads see it from now on, on a standby too, and their cached
 * reads all miss. The position goes first: a read that finds the new cache generation then also
 * finds the position, so it cannot cache a standby's older answer under that generation.
 */
export async function invalidate(deps: ContactsDeps, ownerId: number): Promise<void> {
  await deps.replicas.wrote(ownerId);
  await deps.cache.invalidate(ownerId);
}

interface ContactPage {
  total: number;
  contacts: Contact[];
}

function toPage(page: PageOf<ContactRow>): ContactPage {
  return { total: page.total, contacts: page.rows.map(toContact) };
}

/**
 * Creates the contact of a card a CardDAV client stored (cards.service.ts), with its card columns.
 * Every create goes through this function or createContact: a rule on creates belongs in both.
 */
export async function createFromCard(
  deps: ContactsDeps,
  ownerId: number,
  fields: ContactFields,
  card: repository.CardColumns,
  now: Date,
): Promise<repository.CardRow> {
  const row = await oneWithinQuota(deps, deps.db, ownerId, (db) => repository.insertCardContact(db, ownerId, fields, card, now));
  if (row.id % PROMOTION_CHECK_EVERY === 0) deps.largeOwners.check(ownerId);
  return row;
}

/** Creates a contact for `ownerId`. */
export async function createContact(deps: ContactsDeps, ownerId: number, body: ContactCreate): Promise<Contact> {
  const contact = await insertContact(deps, deps.db, ownerId, body);
  await contactCreated(deps, ownerId, contact.id);
  return contact;
}

/**
 * A create's insert through `db`: the pool, or the transaction that stores an Idempotency-Key's
 * answer with the row. The caller calls contactCreated once it committed.
 */
async function insertContact(deps: ContactsDeps, db: ContactsDeps['db'], ownerId: number, body: ContactCreate): Promise<Contact> {
  const now = deps.now();
  const fields = applyContactRules(writableFields(body), now);
  const row = await writing(() => oneWithinQuota(deps, db, ownerId, (db) => repository.insertContact(db, ownerId, fields, now)));
  return toContact(row);
}

/** After a create committed: the owner's cached reads miss, and a sampled id checks for a large owner. */
async function contactCreated(deps: ContactsDeps, ownerId: number, id: number): Promise<void> {
  await invalidate(deps, ownerId);
  if (id % PROMOTION_CHECK_EVERY === 0) deps.largeOwners.check(ownerId);
}

/**
 * createContact for a request with an Idempotency-Key (idempotency.service.ts): the insert and
 * `answerOf` its contact (the 201 as the route sends it) commit together, and a retry gets that
 * answer again, writing nothing, whatever the quota and the e-mails are by then.
 */
export async function createContactOnce(
  deps: ContactsDeps & IdempotencyDeps,
  keyed: KeyedRequest<'createContact'>,
  body: ContactCreate,
  answerOf: (contact: Contact) => OperationResult<'createContact'>,
): Promise<OperationResult<'createContact'>> {
  const { answer, replayed } = await writeOnce(deps, keyed, async (db) => ({
    answer: answerOf(await insertContact(deps, db, keyed.ownerId, body)),
    wrote: true,
  }));
  if (!replayed) await contactCreated(deps, keyed.ownerId, answer.body.id);
  return answer;
}

/** One of the owner's contacts; 404 when it is missing or someone else's. */
export async function getContact(deps: ContactsDeps, ownerId: number, id: number): Promise<Contact> {
  const row = await readingOwner(deps, ownerId, 'own-writes', (db) => repository.findContact(db, ownerId, id));
  if (!row) throw new NotFound(NOT_FOUND);
  return toContact(row);
}

/** The strong tag of a contact's state: `updated_at` moves on every write and never repeats for it. */
export function contactTag(contact: Contact): string {
  return `"${Date.parse(contact.updated_at).toString(36)}-${contact.id.toString(36)}"`;
}

/** What an If-Match header lets through: any existing contact, or one in one of these versions (`updated_at`). */
type Precondition = { anyVersion: true } | { versions: Date[] };

/** The precondition of If-Match for contact `id` (strong comparison: only the tags this service issues for it count). */
function preconditionOf(ifMatch: string | undefined, id: number): Precondition | undefined {
  if (ifMatch === undefined) return undefined;
  const tags = listedTags(ifMatch);
  if (tags === '*') return { anyVersion: true };
  const versions = tags.flatMap((tag) => {
    const match = /^"([0-9a-z]{1,12})-([0-9a-z]{1,7})"$/.exec(tag);
    if (!match || parseInt(match[2]!, 36) !== id) return [];
    // Twelve base-36 digits reach past the last date JavaScript holds: such a tag names no version.
    const version = new Date(parseInt(match[1]!, 36));
    return Number.isNaN(version.getTime()) ? [] : [version];
  });
  return { versions };
}

/**
 * Runs a write of contact `id` under the precondition; when it finds nothing to write, 412 if the
 * contact exists (so the precondition failed), else 404. The write itself checks the version.
 */
async function conditionally(
  deps: ContactsDeps,
  ownerId: number,
  id: number,
  precondition: Precondition | undefined,
  write: (versions: readonly Date[] | undefined) => Promise<ContactRow | undefined>,
): Promise<ContactRow> {
  const versions = precondition && 'versions' in precondition ? precondition.versions : undefined;
  const row = versions?.length === 0 ? undefined : await write(versions);
  if (row) return row;
  if (versions && (await repository.findContact(deps.db, ownerId, id))) throw new PreconditionFailed(CHANGED);
  throw new NotFound(NOT_FOUND);
}

/** PUT: the five fields replace the stored ones; `additional_data` left out keeps its value. */
export async function replaceContact(
  deps: ContactsDeps,
  ownerId: number,
  id: number,
  body: ContactCreate,
  ifMatch?: string,
): Promise<Contact> {
  return update(deps, ownerId, id, writableFields(body), ifMatch);
}

/**
 * PATCH: any subset of the writable fields. With at least one, a write (even with unchanged values);
 * with none, the contact as stored, if it meets the precondition.
 */
export async function updateContact(
  deps: ContactsDeps,
  ownerId: number,
  id: number,
  body: ContactPatch,
  ifMatch?: string,
): Promise<Contact> {
  const fields = writableFields(body);
  if (Object.keys(fields).length > 0) return update(deps, ownerId, id, fields, ifMatch);
  const precondition = preconditionOf(ifMatch, id);
  const row = await repository.findContact(deps.db, ownerId, id);
  if (!row) throw new NotFound(NOT_FOUND);
  if (
    precondition &&
    'versions' in precondition &&
    !precondition.versions.some((version) => version.getTime() === row.updated_at.getTime())
  ) {
    throw new PreconditionFailed(CHANGED);
  }
  return toContact(row);
}

async function update(
  deps: ContactsDeps,
  ownerId: number,
  id: number,
  fields: ContactFields,
  ifMatch: string | undefined,
): Promise<Contact> {
  const precondition = preconditionOf(ifMatch, id);
  const now = deps.now();
  const checked = applyContactRules(fields, now);
  const row = await conditionally(deps, ownerId, id, precondition, (versions) =>
    writing(
      async () =>
        (await repository.updateContact(deps.db, ownerId, id, checked, now, versions)) ??
        updateWithCard(deps, ownerId, id, checked, now, versions),
    ),
  );
  await invalidate(deps, ownerId);
  return toContact(row);
}

/**
 * The write of a contact whose client stored a card: the card's mapped properties are rewritten
 * with the fields (docs/carddav.md), in a write that holds only if the contact is still in the
 * version the card was read in; a write in between makes it read again (and under If-Match, the
 * precondition then fails). Undefined when the contact is missing, or in none of `versions`.
 */
async function updateWithCard(
  deps: ContactsDeps,
  ownerId: number,
  id: number,
  fields: ContactFields,
  now: Date,
  versions: readonly Date[] | undefined,
): Promise<ContactRow | undefined> {
  for (;;) {
    const stored = await repository.findCardRow(deps.db, ownerId, id);
    if (!stored || (versions && !versions.some((version) => version.getTime() === stored.updated_at.getTime()))) return undefined;
    const written =
      stored.card === null
        ? await repository.updateContact(deps.db, ownerId, id, fields, now, [stored.updated_at])
        : await repository.updateCardContact(
            deps.db,
            ownerId,
            id,
            fields,
            { card: rewriteCard(stored.card, toContact(stored), fields, now), uid: stored.uid },
            now,
            [stored.updated_at],
          );
    if (written) return written;
  }
}

/** Deletes one of the owner's contacts (if it meets If-Match) and returns it as it was. */
export async function deleteContact(deps: ContactsDeps, ownerId: number, id: number, ifMatch?: string): Promise<Contact> {
  const row = await conditionally(deps, ownerId, id, preconditionOf(ifMatch, id), (versions) =>
    repository.deleteContact(deps.db, ownerId, id, versions),
  );
  await invalidate(deps, ownerId);
  return toContact(row);
}

/** A page of the owner's contacts matching the filter expression `query`, in `sort` order; a bad expression is a 400. */
export async function listContacts(
  deps: ContactsDeps,
  ownerId: number,
  query: string | undefined,
  sort: string,
  page: PageRequest,
): Promise<ContactPage> {
  const { conditions, keys } = parseListing(query, sort);
  return toPage(await readingOwner(deps, ownerId, 'own-writes', (db) => repository.listContacts(db, ownerId, conditions, page, keys)));
}

/** The filter and sort expressions of a listing (the list, an export); a bad one is a 400. */
export function parseListing(query: string | undefined, sort: string): { conditions: Condition[]; keys: SortKey[] } {
  try {
    return { conditions: parseFilter(query ?? ''), keys: parseSort(sort) };
  } catch (error) {
    if (error instanceof FilterError || error instanceof SortError) throw new BadRequest(error.message);
    throw error;
  }
}

/** A page of the owner's contacts whose next birthday is within `days` days of today (UTC). */
export async function listUpcomingBirthdays(deps: ContactsDeps, ownerId: number, days: number, page: PageRequest): Promise<ContactPage> {
  const window = birthdayWindow(deps.now(), days);
  return toPage(await readingOwner(deps, ownerId, 'own-writes', (db) => repository.listUpcomingBirthdays(db, ownerId, window, page)));
}
