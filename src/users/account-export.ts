import type { FileHandle } from 'node:fs/promises';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { ZipFile } from 'yazl';
import { Unauthorized } from '../../plugins/http/errors.js';
import * as contactsRepository from '../contacts/contacts.repository.js';
import { parseListing, toContact } from '../contacts/contacts.service.js';
import { sentWithin } from '../contacts/export-slots.js';
import { vcardOf } from '../contacts/formats/vcard.js';
import { type ExportDeps, openSpool } from '../contacts/transfer.service.js';
import { findUserAvatar } from './account.repository.js';
import { listAppPasswords } from './app-passwords.service.js';
import { findUserById } from './users.repository.js';
import { toUser } from './users.service.js';

/** Rows per FETCH, as the contacts export: one batch is all the archive holds of the contacts in memory. */
const EXPORT_BATCH = 500;
/** What the ZIP format adds to its entries' bytes at most: headers, directory and deflate's worst case for these few files. */
const ZIP_OVERHEAD_BYTES = 64 * 1024;

interface AccountArchive {
  /** Bytes in `content`. */
  size: number;
  content: Readable;
}

/**
 * Everything the account holds as one ZIP (openapi.yaml, exportAccount). The contacts are read
 * once, in id order, from one snapshot into two spool files (the vCard and the JSON array); the
 * archive is then deflated from them and the small parts into a third, which is the answer. Every
 * spool byte counts against the instance's cap, and the export holds one of its slots until the
 * answer's spool is closed, as the contacts export does.
 */
export async function exportAccount(deps: ExportDeps, userId: number): Promise<AccountArchive> {
  const user = await findUserById(deps.db, userId);
  if (!user) throw new Unauthorized();
  const slot = deps.exportSlots.take(userId);
  const spools: FileHandle[] = [];
  const spool = async () => {
    const handle = await openSpool();
    spools.push(handle);
    return handle;
  };
  try {
    const [vcard, json, archive] = [await spool(), await spool(), await spool()];
    const write = async (file: FileHandle, text: string) => {
      // Counted before it is written: the cap bounds what the disk holds.
      slot.grow(Buffer.byteLength(text));
      await file.write(text);
    };
    const { conditions, keys } = parseListing(undefined, 'id');
    let first = true;
    await write(json, '[');
    for await (const rows of contactsRepository.streamContacts(
      deps.db,
      userId,
      conditions,
      keys,
      EXPORT_BATCH,
      deps.config.dbBulkStatementTimeoutMs,
    )) {
      const contacts = rows.map(toContact);
      await write(vcard, contacts.map(vcardOf).join(''));
      await write(json, (first ? '' : ',') + contacts.map((contact) => JSON.stringify(contact)).join(','));
      first = false;
    }
    await write(json, ']');

    const small = {
      'profile.json': Buffer.from(JSON.stringify(toUser(user, deps.config.publicBaseUrl))),
      'app-passwords.json': Buffer.from(JSON.stringify(await listAppPasswords(deps, userId))),
    };
    const avatar = user.avatar === null ? undefined : await findUserAvatar(deps.db, userId);
    const [vcardBytes, jsonBytes] = [(await vcard.stat()).size, (await json.stat()).size];
    slot.grow(
      vcardBytes +
        jsonBytes +
        small['profile.json'].length +
        small['app-passwords.json'].length +
        (avatar?.length ?? 0) +
        ZIP_OVERHEAD_BYTES,
    );

    const zip = new ZipFile();
    const mtime = deps.now();
    zip.addBuffer(small['profile.json'], 'profile.json', { mtime });
    zip.addReadStream(vcard.createReadStream({ start: 0 }), 'contacts.vcf', { mtime, size: vcardBytes });
    zip.addReadStream(json.createReadStream({ start: 0 }), 'contacts.json', { mtime, size: jsonBytes });
    zip.addBuffer(small['app-passwords.json'], 'app-passwords.json', { mtime });
    // Already compressed: stored as it is.
    if (avatar) zip.addBuffer(Buffer.from(avatar), 'avatar.webp', { mtime, compress: false });
    zip.end();
    await pipeline(zip.outputStream, archive.createWriteStream({ start: 0, autoClose: false }));

    const { size } = await archive.stat();
    // The entries' read streams closed their spools; the answer's closes when it is sent or cut.
    spools.length = 0;
    const content = sentWithin(archive.createReadStream({ start: 0 }), deps.config.exportSendTimeoutMs, slot.release);
    return { size, content };
  } catch (error) {
    slot.release();
    await Promise.all(spools.map((handle) => handle.close().catch(() => undefined)));
    throw error;
  }
}
