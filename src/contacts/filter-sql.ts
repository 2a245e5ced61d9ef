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
/**
 * `test` as a condition PostgreSQL estimates at a half and no index serves: for an exact comparison
 * after its key's. Estimated apart, `J%er` seemed to match 162 of 100,000 contacts (the key alone:
 * 3,982; 4,001 do), so a page read and sorted all 4,001 to show 25.
 */
const unestimated = (test: Expression<SqlBool>): RawBuilder<SqlBool> => sql<SqlBool>`coalesce(${test}, false)`;

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

/**
 * The grams of the searched fields, `owner:field:gram` for each run of 1 to 3 characters of each
 * lower-cased field: the expression contacts_large_owner_grams_idx (migrations 009 and 019) holds,
 * with the field numbered by its place in this list. Like the search key, a new `x-search` field changes it.
 */
export const searchGrams = sql<
  string[]
>`contact_search_grams(owner_id, ${sql.join(SEARCHED_FIELDS.map((field) => sql`lower(${sql.ref(field)})`))})`;

/** The gram of `run` in `field` for the owner, lower-cased by PostgreSQL as the index's were. */
const gram = (ownerId: number, field: TextField, run: string): RawBuilder<string> =>
  sql<string>`${`${ownerId}:${(SEARCHED_FIELDS as readonly TextField[]).indexOf(field) + 1}:`} || lower(${run}::text)`;

/**
 * The run of a pattern `%run%` or `%run` whose run, also lower-cased, is 1 to 3 characters without
 * wildcards or escapes (lower-casing can lengthen a character: `İ` is `i̇`), and whether the run may
 * end anywhere (`%run%`): the values that match hold the gram of the run.
 */
function gramRun(pattern: string): { run: string; anywhere: boolean } | null {
  const match = /^%([^%_\\]{1,3})(%?)$/u.exec(pattern);
  if (!match || [...match[1]!.toLowerCase()].length > 3) return null;
  return { run: match[1]!, anywhere: match[2] === '%' };
}

/** The conditions of a parsed filter as one Kysely predicate (AND); every value is a bound parameter. */
export function filterPredicate(eb: ContactsBuilder, conditions: readonly Condition[]): Expression<SqlBool> {
  return eb.and(conditions.map((condition) => conditionPredicate(eb, condition)));
}

/**
 * The owner's contacts matching `conditions`, as a predicate to count them by. For an owner whose
 * contacts the large-owner indexes hold (`large`: src/contacts/large-owners.ts), a condition on a
 * short run (a bare term of 1 to 3 characters, or a like, ilike, contains or endswith of such a run
 * on a searched field) becomes a lookup in contacts_large_owner_grams_idx, which also names the owner.
 * Short runs match many contacts: testing every contact of a large owner costs many times the page.
 * The lookup is the whole answer to a bare term or an ilike `%run%`, so the count tests no row; for
 * case or the value's end, only the contacts holding the run are tested. An ilike without a literal
 * prefix (findsByTrigrams) states the partial trigram indexes' predicate, so they can find its
 * matches. A page of rare matches of a short run is fetched by this predicate too; a walked page
 * keeps the row tests (listContacts).
 */
export function countPredicate(
  eb: ContactsBuilder,
  ownerId: number,
  conditions: readonly Condition[],
  large: boolean,
): Expression<SqlBool> {
  const lookups = conditions.map((condition) => (large ? gramLookup(eb, ownerId, condition) : null));
  const predicates = conditions.map((condition, i) => {
    const predicate = lookups[i] ?? conditionPredicate(eb, condition);
    // The partial indexes' predicate, written as it is there so that the planner sees it implied.
    return large && lookups[i] === null && findsByTrigrams(condition) ? eb.and([sql<SqlBool>`large_owner`, predicate]) : predicate;
  });
  // Every gram starts with the owner: a separate owner condition would be a test of each row.
  return eb.and(lookups.some((lookup) => lookup !== null) ? predicates : [eb('owner_id', '=', ownerId), ...predicates]);
}

/** `condition` as a lookup of the grams its matches hold one of, or null when it has no short run. */
function gramLookup(eb: ContactsBuilder, ownerId: number, condition: Condition): Expression<SqlBool> | null {
  const grams = gramsOf(condition);
  if (grams === null) return null;
  // The partial index's predicate, written as it is there so that the planner sees it implied.
  const lookup = eb.and([
    sql<SqlBool>`large_owner`,
    eb(searchGrams, '&&', sql<string[]>`array[${sql.join(grams.runs.map(([field, run]) => gram(ownerId, field, run)))}]`),
  ]);
  return grams.whole ? lookup : eb.and([lookup, conditionPredicate(eb, condition)]);
}

/**
 * Whether `condition` is a case-insensitive like with no literal prefix whose pattern holds a run of
 * 3 or more characters: the trigram indexes of a large owner (migration 022) find the contacts that
 * may match it. One with a literal prefix is a range of the per-field btree.
 */
export function findsByTrigrams(condition: Condition): boolean {
  return condition.type === 'like' && condition.caseInsensitive && /^[%_]/.test(condition.pattern) && /[^%_\\]{3}/u.test(condition.pattern);
}

/** Whether some condition is looked up by its grams (see countPredicate), which then find its matches. */
export function findsByGrams(conditions: readonly Condition[]): boolean {
  return conditions.some((condition) => gramsOf(condition) !== null);
}

/**
 * The (field, run) grams that `condition`'s matches hold one of, and whether holding one is the
 * whole test; null when it has no short run.
 */
function gramsOf(condition: Condition): { runs: [TextField, string][]; whole: boolean } | null {
  if (condition.type === 'like' && (SEARCHED_FIELDS as readonly TextField[]).includes(condition.field)) {
    const found = gramRun(condition.pattern);
    if (found === null) return null;
    return { runs: [[condition.field, found.run]], whole: condition.caseInsensitive && found.anywhere };
  }
  if (condition.type !== 'search') return null;
  const found = gramRun(condition.pattern);
  const phonePattern = extraPhonePattern(condition);
  const phoneRun = phonePattern === null ? null : gramRun(phonePattern);
  if (found === null || (phonePattern !== null && phoneRun === null)) return null;
  const runs = SEARCHED_FIELDS.map((field): [TextField, string] => [field, found.run]);
  return { runs: phoneRun === null ? runs : [...runs, [PHONE_FIELD, phoneRun.run]], whole: true };
}

/**
 * The phone's own pattern for a bare term: the term without the separators stored phones lose,
 * when the phone is searched and that differs from the term as typed (which the phone is searched
 * for with the other fields).
 */
function extraPhonePattern({ pattern, phonePattern }: Extract<Condition, { type: 'search' }>): string | null {
  return SEARCHED_FIELDS.includes(PHONE_FIELD) && phonePattern !== null && phonePattern !== pattern ? phonePattern : null;
}

/**
 * Case-sensitive conditions that a range of the key can serve (eq, in_, a pattern with a literal
 * prefix) also state what they imply for the lower-cased key (lower-casing is character by
 * character), so the btree finds the candidates; the exact comparison then decides, hidden from
 * the planner's estimate (unestimated): it would multiply the two shares as if independent, and the
 * far too low estimate would make it read every match to sort a page instead of stopping at the
 * page. A pattern that starts with a wildcard has no range of the key and states none.
 */
function conditionPredicate(eb: ContactsBuilder, condition: Condition): Expression<SqlBool> {
  switch (condition.type) {
    case 'search': {
      const { pattern } = condition;
      // A term holding the separator could match across two fields in the key: such a term (only
      // a field holding U+001F could match it) is searched field by field.
      const inKey = !pattern.includes(SEARCH_KEY_SEPARATOR);
      const textArms = inKey
        ? [eb(searchKey, 'like', lower(pattern))]
        : SEARCHED_FIELDS.map((field) => eb(folded(field), 'like', lower(pattern)));
      const phonePattern = extraPhonePattern(condition);
      const phoneArms = phonePattern === null ? [] : [eb(folded(PHONE_FIELD), 'like', lower(phonePattern))];
      return eb.or([...textArms, ...phoneArms]);
    }
    case 'eq':
      return eb.and([
        eb(folded(condition.field), '=', lower(condition.value)),
        unestimated(eb(exact(condition.field), '=', condition.value)),
      ]);
    case 'in':
      if (condition.values.length === 0) return sql<SqlBool>`false`;
      return eb.and([
        eb(folded(condition.field), 'in', condition.values.map(lower)),
        unestimated(eb(exact(condition.field), 'in', condition.values)),
      ]);
    case 'like': {
      const key = eb(folded(condition.field), 'like', lower(condition.pattern));
      if (condition.caseInsensitive) return key;
      const exactMatch = eb(condition.field, 'like', condition.pattern);
      return /^[%_]/.test(condition.pattern) ? exactMatch : eb.and([key, unestimated(exactMatch)]);
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
