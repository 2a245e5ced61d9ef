import { type Expression, type ExpressionBuilder, type RawBuilder, type SqlBool, sql } from 'kysely';
import type { Database } from '../db/database.js';
import { type Bound, type Condition, isDayField, PHONE_FIELD, SEARCHED_FIELDS, type TextField } from './filter.js';

type ContactsBuilder = ExpressionBuilder<Database, 'contacts'>;

/**
 * The key of the per-owner text indexes (migration 003): the value lower-cased, compared byte-wise.
 * `ilike` is exactly `lower(value) like lower(pattern)` (how PostgreSQL defines it for UTF-8), so
 * written this way the lower-casing comes from the index instead of being redone for every row.
 */
const folded = (field: TextField): RawBuilder<string> => sql<string>`lower(${sql.ref(field)}) collate "C"`;
const lower = (value: string): RawBuilder<string> => sql<string>`lower(${value}::text)`;
/** The value itself under the index's collation; equality is byte-wise under any deterministic collation. */
const exact = (field: TextField): RawBuilder<string> => sql<string>`${sql.ref(field)} collate "C"`;

const SEARCH_KEY_SEPARATOR = '\u001f';
/**
 * What a bare term is searched in: the searched fields lower-cased, joined by U+001F. It is the key
 * that contacts_owner_search_idx (migration 007) holds beside the fields, so PostgreSQL reads it
 * from the index instead of lower-casing every field of every row. A new `x-search` field changes
 * it, and then needs a migration that builds the index anew.
 */
export const searchKey = sql<string>`(${sql.join(
  SEARCHED_FIELDS.map((field) => sql`coalesce(lower(${sql.ref(field)}), '')`),
  sql` || ${sql.lit(SEARCH_KEY_SEPARATOR)} || `,
)}) collate "C"`;

/** The conditions of a parsed filter as one Kysely predicate (AND); every value is a bound parameter. */
export function filterPredicate(eb: ContactsBuilder, conditions: readonly Condition[]): Expression<SqlBool> {
  return eb.and(conditions.map((condition) => conditionPredicate(eb, condition)));
}

/**
 * Case-sensitive conditions that a range of the key can serve (eq, in_, a pattern with a literal
 * prefix) also state what they imply for the lower-cased key (lower-casing is character by
 * character), so the btree finds the candidates; the exact comparison then decides. Other
 * patterns do not: the planner multiplies the two conditions' selectivities, and the far too low
 * estimate would make it read every match to sort a page instead of stopping at the page.
 */
function conditionPredicate(eb: ContactsBuilder, condition: Condition): Expression<SqlBool> {
  switch (condition.type) {
    case 'search': {
      const { pattern, phonePattern } = condition;
      // A term holding the separator could match across two fields in the key: such a term (only
      // a field holding U+001F could match it) is searched field by field.
      const inKey = !pattern.includes(SEARCH_KEY_SEPARATOR);
      const textArms = inKey ? [eb(searchKey, 'like', lower(pattern))] : SEARCHED_FIELDS.map((field) => eb(folded(field), 'like', lower(pattern)));
      // The phone is searched for the term without the separators stored phones lose: an extra
      // arm only when that differs from the term as typed, which the key already covers.
      const phoneSearched = SEARCHED_FIELDS.includes(PHONE_FIELD) && phonePattern !== null && phonePattern !== pattern;
      const phoneArms = phoneSearched ? [eb(folded(PHONE_FIELD), 'like', lower(phonePattern))] : [];
      return eb.or([...textArms, ...phoneArms]);
    }
    case 'eq':
      return eb.and([eb(folded(condition.field), '=', lower(condition.value)), eb(exact(condition.field), '=', condition.value)]);
    case 'in':
      if (condition.values.length === 0) return sql<SqlBool>`false`;
      return eb.and([eb(folded(condition.field), 'in', condition.values.map(lower)), eb(exact(condition.field), 'in', condition.values)]);
    case 'like': {
      const key = eb(folded(condition.field), 'like', lower(condition.pattern));
      if (condition.caseInsensitive) return key;
      const exactMatch = eb(condition.field, 'like', condition.pattern);
      return /^[%_]/.test(condition.pattern) ? exactMatch : eb.and([key, exactMatch]);
    }
    case 'range': {
      const parts: Expression<SqlBool>[] = [];
      const value = (bound: Bound) => (isDayField(condition.field) ? bound.value : sql<Date>`cast(${bound.value} as timestamptz)`);
      if (condition.lower) parts.push(eb(condition.field, condition.lower.inclusive ? '>=' : '>', value(condition.lower)));
      if (condition.upper) parts.push(eb(condition.field, condition.upper.inclusive ? '<=' : '<', value(condition.upper)));
      return eb.and(parts);
    }
  }
}
