/**
 * The `sort` parameter of the list (openapi.yaml, the `sort` parameter), parsed into typed keys.
 * Pure: contacts.repository.ts turns the keys into ORDER BY.
 */
import { schemaFields } from '../generated/schemas.js';

const { sortable, kinds } = schemaFields.Contact;

/** The keys `sort` takes: the properties marked `x-sort` in openapi.yaml. */
const SORT_FIELDS = sortable;
type SortField = (typeof SORT_FIELDS)[number];

/** Text fields order by their lower-cased value, then by the value itself. */
export const TEXT_SORT_FIELDS: readonly SortField[] = SORT_FIELDS.filter((field) => kinds[field] === 'text');

export interface SortKey {
  field: SortField;
  descending: boolean;
}

const MAX_SORT_KEYS = 3;

/** A sort expression that cannot be used; `message` is the API's `detail`. */
export class SortError extends Error {}

const isSortField = (name: string): name is SortField => (SORT_FIELDS as readonly string[]).includes(name);

/**
 * Parses `-birthday,last_name` into keys, left to right: an unknown field is reported by name, an
 * empty key or a field named twice as a bad expression, and too many keys last.
 */
export function parseSort(expression: string): SortKey[] {
  const keys: SortKey[] = [];
  for (const part of expression.split(',')) {
    const descending = part.startsWith('-');
    const field = descending ? part.slice(1) : part;
    if (field === '') throw new SortError('Invalid sort expression');
    if (!isSortField(field)) throw new SortError(`Invalid sort field '${field}'`);
    if (keys.some((key) => key.field === field)) throw new SortError('Invalid sort expression');
    keys.push({ field, descending });
  }
  if (keys.length > MAX_SORT_KEYS) throw new SortError('Invalid sort expression');
  return keys;
}
