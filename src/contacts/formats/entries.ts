import { parse } from 'secure-json-parse';
import type { components } from '../../generated/openapi.js';

export type Contact = components['schemas']['Contact'];

/**
 * What an import entry says about a contact, as text, not yet checked: the caller runs the rules of
 * `POST /api/contacts/` on it. A key is absent when the entry does not carry that field.
 */
export interface ImportFields {
  first_name?: string;
  last_name?: string;
  email?: string;
  phone?: string;
  birthday?: string;
  additional_data?: Record<string, unknown> | null;
}

/** One card or CSV row, numbered from 1: its fields, or why they could not be read. */
export type ImportEntry = { entry: number; fields: ImportFields } | { entry: number; detail: string };

/**
 * A whole body: its entries in order, or (`ok: false`) a body that is no import at all (a 400), or
 * one past a limit of the import as a whole (`tooLarge`: a 413).
 */
export type ImportResult = { ok: true; entries: ImportEntry[] } | { ok: false; detail: string; tooLarge?: true };

/**
 * The longest logical line, in UTF-8 bytes: a vCard property with its folded and quoted-printable
 * continuations, or a CSV record with the line breaks inside its quoted fields. The longest
 * property an entry maps (16 KiB of `additional_data`, escaped or quoted-printable) is a fraction
 * of it; a longer line is that entry's error, and reading goes on.
 */
export const MAX_LINE_BYTES = 262_144;

/**
 * Blank lines (and, in vCard, lines outside any card) that one import may hold. They are no
 * entries, so the entry limit does not bound them; past this many the import is refused (413).
 */
export const MAX_BLANK_LINES = 100_000;

export interface ImportOptions {
  /** Read at most this many entries (at least 1) and ignore the rest: pass the limit + 1 to detect "too many" early. */
  maxEntries?: number;
}

/** `additional_data` from its JSON text: an object (or `null`), else the entry's error in the API's 422 wording. */
export function additionalDataOf(text: string): { value: Record<string, unknown> | null } | { detail: string } {
  let value: unknown;
  try {
    value = parse(text, { protoAction: 'error', constructorAction: 'error' });
  } catch (error) {
    if (error instanceof SyntaxError && error.message.startsWith('Object contains forbidden')) {
      return { detail: 'body/additional_data must not contain "__proto__" or "constructor.prototype" keys' };
    }
    if (error instanceof RangeError) return { detail: 'body/additional_data is nested too deeply' };
    return { detail: 'body/additional_data must be a JSON object' };
  }
  if (value !== null && (typeof value !== 'object' || Array.isArray(value)))
    return { detail: 'body/additional_data must be a JSON object' };
  return { value: value as Record<string, unknown> | null };
}
