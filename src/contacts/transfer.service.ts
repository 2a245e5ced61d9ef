import { randomUUID } from 'node:crypto';
import { type FileHandle, open, unlink } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Readable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { allowLongStatements } from '../../plugins/db.js';
import { BadRequest, HttpError } from '../../plugins/http/errors.js';
import { bodyCheckerOf } from '../../plugins/http/operations.js';
import type { Metrics } from '../../plugins/metrics.js';
import { WorkerPoolBusy, WorkerTimedOut } from '../../plugins/worker-pool.js';
import type { components } from '../generated/openapi.js';
import { operationTable } from '../generated/operations.js';
import { type IdempotencyDeps, type KeyedRequest, storedAnswer, writeOnce } from '../idempotency/idempotency.service.js';
import type { OperationResult } from '../operation-types.js';
import * as repository from './contacts.repository.js';
import {
  applyContactRules,
  type ContactsDeps,
  DUPLICATE_EMAIL,
  invalidate,
  parseListing,
  toContact,
  withinQuota,
  writableFields,
} from './contacts.service.js';
import { sentWithin } from './export-slots.js';
import { csvHeader, csvRowOf } from './formats/csv.js';
import type { ImportFields, ImportResult } from './formats/entries.js';
import parseImport, { type ImportType, type ParseTask } from './formats/import-worker.js';
import { vcardOf } from './formats/vcard.js';

type ContactCreate = components['schemas']['ContactCreate'];
type ImportReport = components['schemas']['ImportReport'];
type ExportFormat = 'vcard' | 'csv';
export type { ImportType };
/** What an import needs from the app beyond the contacts' own. */
/** Exports and imports also count what they move (`app.metrics`). */
export type ExportDeps = ContactsDeps & Pick<FastifyInstance, 'metrics' | 'exportSlots'>;
export type ImportDeps = ContactsDeps & Pick<FastifyInstance, 'metrics' | 'workerPool'>;

/** Rows per FETCH: one batch is all an export holds in memory. */
const EXPORT_BATCH = 500;
const MAX_IMPORT_ENTRIES = 10_000;

const EXPORTS = {
  vcard: { contentType: 'text/vcard; charset=utf-8', fileName: 'contacts.vcf', header: '', entry: vcardOf },
  csv: { contentType: 'text/csv; charset=utf-8', fileName: 'contacts.csv', header: csvHeader(), entry: csvRowOf },
} as const;

/**
 * Bodies up to this size are read on the event loop, which takes a few milliseconds at most; larger
 * ones in app.workerPool's thread, within IMPORT_PARSE_TIMEOUT_MS.
 */
const IN_PLACE_MAX_BYTES = 8192;
const PARSE_WORKER = new URL('./formats/import-worker.js', import.meta.url);

/** Each entry of an import, created or reported in its answer's `errors`. */
const IMPORT_ENTRIES = {
  name: 'contacts_import_entries_total',
  help: 'Entries of imports, created or rejected (invalid, or a duplicate e-mail).',
  labelNames: ['result'],
  series: [{ result: 'created' }, { result: 'rejected' }],
} as const;

/** Each contact written into an export. */
const EXPORTED_CONTACTS = {
  name: 'contacts_export_contacts_total',
  help: 'Contacts written into exports, by file format.',
  labelNames: ['format'],
  series: [{ format: 'vcard' }, { format: 'csv' }],
} as const;

/** Makes the import and export counters at start-up, so their series exist (at 0) before the first import or export. */
export function declareTransferMetrics(metrics: Metrics): void {
  metrics.counter(IMPORT_ENTRIES);
  metrics.counter(EXPORTED_CONTACTS);
}

/** An import entry is a create: checked as the route checks a create's body. */
const checkCreateBody = bodyCheckerOf(operationTable.createContact);

interface ContactsFile {
  contentType: string;
  fileName: string;
  /** Bytes in `content`. */
  size: number;
  content: Readable;
}

/**
 * Every contact of the owner matching `query`, in `sort` order, as a vCard or CSV file. The rows
 * come from one snapshot in batches and are written, batch by batch, to a private temporary file at
 * the database's pace; the answer is sent from that file. So memory stays flat at any count, the
 * transaction ends before the answer starts (a slow or stalled download holds no connection), and
 * a database failure is an error answer (503), never a cut-off file. A bad expression is a 400.
 * The export holds one of the instance's slots (deps.exportSlots) until its spool is closed: sent,
 * its client gone, or cut after EXPORT_SEND_TIMEOUT_MS without the client taking a byte.
 */
export async function exportContacts(
  deps: ExportDeps,
  ownerId: number,
  format: ExportFormat,
  query: string | undefined,
  sort: string,
): Promise<ContactsFile> {
  const { conditions, keys } = parseListing(query, sort);
  const { contentType, fileName, header, entry } = EXPORTS[format];
  const slot = deps.exportSlots.take(ownerId);
  const spool = await openSpool().catch((error: unknown) => {
    slot.release();
    throw error;
  });
  try {
    if (header) {
      slot.grow(Buffer.byteLength(header));
      await spool.write(header);
    }
    let count = 0;
    for await (const rows of repository.streamContacts(
      deps.db,
      ownerId,
      conditions,
      keys,
      EXPORT_BATCH,
      deps.config.dbBulkStatementTimeoutMs,
    )) {
      const text = rows.map((row) => entry(toContact(row))).join('');
      // Counted before it is written: the cap bounds what the disk holds.
      slot.grow(Buffer.byteLength(text));
      await spool.write(text);
      count += rows.length;
    }
    deps.metrics.counter(EXPORTED_CONTACTS).inc({ format }, count);
    const { size } = await spool.stat();
    // The read stream closes the handle when it ends or the client goes away; that frees the slot.
    const content = sentWithin(spool.createReadStream({ start: 0 }), deps.config.exportSendTimeoutMs, slot.release);
    return { contentType, fileName, size, content };
  } catch (error) {
    slot.release();
    await spool.close();
    throw error;
  }
}

/**
 * What a HEAD of the export answers: the file's type and name, after the same checks of `query`
 * and `sort` as the export (400 alike), without reading a contact. Its size is known only once the
 * file is written, so it has none (RFC 9110 §9.3.2 lets a HEAD leave out such fields).
 */
export function exportHead(format: ExportFormat, query: string | undefined, sort: string): Pick<ContactsFile, 'contentType' | 'fileName'> {
  parseListing(query, sort);
  const { contentType, fileName } = EXPORTS[format];
  return { contentType, fileName };
}

/** A private temporary file, already unlinked: the open handle keeps it, and nothing is left behind however the export ends. */
export async function openSpool(): Promise<FileHandle> {
  const spoolPath = path.join(os.tmpdir(), `contacts-export-${randomUUID()}`);
  const spool = await open(spoolPath, 'wx+', 0o600);
  await unlink(spoolPath);
  return spool;
}

/**
 * Creates a contact from each valid entry of a vCard or CSV body, all in one transaction, and
 * reports the others by entry number in the wording a create would answer (422 or 409).
 */
export async function importContacts(deps: ImportDeps, ownerId: number, type: ImportType, body: Uint8Array): Promise<ImportReport> {
  const report = await writeImport(deps, deps.db, ownerId, await readImport(deps, type, body));
  await imported(deps, ownerId, report);
  return report;
}

/**
 * importContacts for a request with an Idempotency-Key (idempotency.service.ts): a stored answer is
 * sent again before the body is read again; otherwise the inserts and the answer commit together
 * (an import that created nothing stores nothing).
 */
export async function importContactsOnce(
  deps: ImportDeps & IdempotencyDeps,
  keyed: KeyedRequest<'importContacts'>,
  type: ImportType,
  body: Uint8Array,
): Promise<OperationResult<'importContacts'>> {
  const stored = await storedAnswer(deps, keyed);
  if (stored) return stored;
  const read = await readImport(deps, type, body);
  const { answer, replayed } = await writeOnce(deps, keyed, async (db) => {
    const report = await writeImport(deps, db, keyed.ownerId, read);
    return { answer: { status: 200 as const, body: report }, wrote: report.created > 0 };
  });
  if (!replayed) await imported(deps, keyed.ownerId, answer.body);
  return answer;
}

/** An import's entries as read and checked: the valid ones to create, and the others' errors. */
interface ReadImport {
  now: Date;
  errors: ImportReport['errors'];
  valid: { entry: number; email: string }[];
  contacts: repository.ContactFields[];
}

/** The entries of an import body, each checked as a create (no database yet); 400 or 413 for a body that is no import. */
async function readImport(deps: ImportDeps, type: ImportType, body: Uint8Array): Promise<ReadImport> {
  const parsed = await parseBody(deps, { type, body, maxEntries: MAX_IMPORT_ENTRIES + 1 });
  if (!parsed.ok) throw parsed.tooLarge ? new HttpError(413, parsed.detail) : new BadRequest(parsed.detail);
  if (parsed.entries.length > MAX_IMPORT_ENTRIES) throw new HttpError(413, `Too many contacts in one import (max ${MAX_IMPORT_ENTRIES})`);

  const now = deps.now();
  const errors: ImportReport['errors'] = [];
  const valid: { entry: number; email: string }[] = [];
  const contacts: repository.ContactFields[] = [];
  const emailsSeen = new Set<string>();
  for (const entry of parsed.entries) {
    const outcome = 'detail' in entry ? entry : createFields(entry.fields, now);
    if ('detail' in outcome) {
      errors.push({ entry: entry.entry, detail: outcome.detail });
    } else if (emailsSeen.has(outcome.email!.toLowerCase())) {
      errors.push({ entry: entry.entry, detail: DUPLICATE_EMAIL });
    } else {
      emailsSeen.add(outcome.email!.toLowerCase());
      valid.push({ entry: entry.entry, email: outcome.email! });
      contacts.push(outcome);
    }
  }
  return { now, errors, valid, contacts };
}

/**
 * The valid entries inserted through `db` (the pool, or an Idempotency-Key's transaction) within
 * the owner's quota, and the answer: entries whose e-mail the owner had already are reported then.
 */
async function writeImport(deps: ImportDeps, db: ImportDeps['db'], ownerId: number, read: ReadImport): Promise<ImportReport> {
  const { now, valid, contacts } = read;
  // Counted whole: an import that would pass the quota writes nothing.
  const inserted =
    contacts.length === 0
      ? new Set<string>()
      : await withinQuota(
          deps,
          db,
          ownerId,
          async (db) => {
            await allowLongStatements(db, deps.config.dbBulkStatementTimeoutMs);
            const emails = await repository.insertContacts(db, ownerId, contacts, now);
            return { result: emails, added: emails.size };
          },
          (max, had, adding) =>
            `The import would take the contacts past the limit of ${max} per user (${had} now, ${adding} new in the file); nothing was imported`,
        );
  const errors = [...read.errors];
  for (const { entry, email } of valid) {
    if (!inserted.has(email)) errors.push({ entry, detail: DUPLICATE_EMAIL });
  }
  return { created: inserted.size, errors: errors.sort((a, b) => a.entry - b.entry) };
}

/** After an import committed: the owner's caches and the large-owner check when it created any, and the counters. */
async function imported(deps: ImportDeps, ownerId: number, report: ImportReport): Promise<void> {
  if (report.created > 0) {
    await invalidate(deps, ownerId);
    deps.largeOwners.check(ownerId);
  }
  const entries = deps.metrics.counter(IMPORT_ENTRIES);
  entries.inc({ result: 'created' }, report.created);
  entries.inc({ result: 'rejected' }, report.errors.length);
}

/** The entries of an import body, read in place or in the worker pool (503 when it is busy or the time is up). */
async function parseBody(deps: ImportDeps, task: ParseTask): Promise<ImportResult> {
  if (task.body.byteLength <= IN_PLACE_MAX_BYTES) return parseImport(task);
  const timeoutMs = deps.config.importParseTimeoutMs;
  try {
    return await deps.workerPool.run<ImportResult>(PARSE_WORKER, task, timeoutMs);
  } catch (error) {
    if (error instanceof WorkerTimedOut) {
      const seconds = Math.ceil(timeoutMs / 1000);
      throw new HttpError(503, `Reading the import took longer than ${seconds} s; try again later or send it in smaller files`, {
        'Retry-After': seconds,
      });
    }
    if (error instanceof WorkerPoolBusy) {
      throw new HttpError(503, 'Too many imports are being read; try again later', { 'Retry-After': error.retryAfterSeconds });
    }
    throw error;
  }
}

/** The fields of a create from an entry's, or the 422 `detail` a create with them would answer. */
function createFields(fields: ImportFields, now: Date): repository.ContactFields | { detail: string } {
  const checked = checkCreateBody({ ...fields });
  if ('detail' in checked) return checked;
  try {
    return applyContactRules(writableFields(checked.body as ContactCreate), now);
  } catch (error) {
    if (error instanceof HttpError) return { detail: error.message };
    throw error;
  }
}
