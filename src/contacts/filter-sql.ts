import { type Expression, type ExpressionBuilder, type SqlBool, sql } from 'kysely';
import type { Database } from '../db/database.js';
import type { Bound, Condition } from './filter.js';

type ContactsBuilder = ExpressionBuilder<Database, 'contacts'>;

/** The conditions of a parsed filter as one Kysely predicate (AND); every value is a bound parameter. */
export function filterPredicate(eb: ContactsBuilder, conditions: readonly Condition[]): Expression<SqlBool> {
  return eb.and(conditions.map((condition) => conditionPredicate(eb, condition)));
}

function conditionPredicate(eb: ContactsBuilder, condition: Condition): Expression<SqlBool> {
  switch (condition.type) {
    case 'search': {
      const arms = [
        eb('first_name', 'ilike', condition.pattern),
        eb('last_name', 'ilike', condition.pattern),
        eb('email', 'ilike', condition.pattern),
      ];
      if (condition.phonePattern !== null) arms.push(eb('phone', 'ilike', condition.phonePattern));
      return eb.or(arms);
    }
    case 'eq':
      return eb(condition.field, '=', condition.value);
    case 'in':
      return condition.values.length === 0 ? sql<SqlBool>`false` : eb(condition.field, 'in', condition.values);
    case 'like':
      return eb(condition.field, condition.caseInsensitive ? 'ilike' : 'like', condition.pattern);
    case 'range': {
      const parts: Expression<SqlBool>[] = [];
      const value = (bound: Bound) => (condition.field === 'birthday' ? bound.value : sql<Date>`cast(${bound.value} as timestamptz)`);
      if (condition.lower) parts.push(eb(condition.field, condition.lower.inclusive ? '>=' : '>', value(condition.lower)));
      if (condition.upper) parts.push(eb(condition.field, condition.upper.inclusive ? '<=' : '<', value(condition.upper)));
      return eb.and(parts);
    }
  }
}
