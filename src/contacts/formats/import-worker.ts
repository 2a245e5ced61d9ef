/*
 * An import body read into entries: UTF-8 decoding and the vCard or CSV codec. transfer.service.ts
 * runs it in place for a small body and in app.workerPool's thread for a larger one, so it imports
 * nothing that needs the app.
 */
import { TextDecoder } from 'node:util';
import { parseCsv } from './csv.js';
import type { ImportResult } from './entries.js';
import { parseVcards } from './vcard.js';

export type ImportType = 'text/vcard' | 'text/csv';

export interface ParseTask {
  type: ImportType;
  body: Uint8Array;
  /** Read at most this many entries. */
  maxEntries: number;
}

const PARSERS: Record<ImportType, (text: string, options: { maxEntries: number }) => ImportResult> = {
  'text/vcard': parseVcards,
  'text/csv': parseCsv,
};

/** The entries of an import body; a body that is not UTF-8 is no import. */
export default function parseImport({ type, body, maxEntries }: ParseTask): ImportResult {
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(body);
  } catch {
    return { ok: false, detail: 'The body is not valid UTF-8' };
  }
  return PARSERS[type](text, { maxEntries });
}
