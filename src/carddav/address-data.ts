import { type CardLine, cardText, componentsOf, parseCard, unescapeValue } from '../contacts/formats/card.js';
import { shortened } from './errors.js';
import { CARDDAV, child, children, type XmlElement } from './xml.js';

/*
 * What the REPORTs read of a card's text: a partial `C:address-data` (RFC 6352 §10.4) and the
 * `C:filter` of addressbook-query (§10.5).
 */

/** Kept in every partial card: the card's frame and identity. */
const ALWAYS = new Set(['BEGIN', 'END', 'VERSION', 'UID']);

/**
 * The card with only the named properties (plus BEGIN, END, VERSION and UID), each line as stored;
 * a property in a group keeps the group's other lines (`item1.EMAIL` keeps `item1.X-ABLabel`).
 */
export function filterCardProperties(text: string, names: readonly string[]): string {
  const card = parseCard(text);
  const wanted = new Set(names);
  const groups = new Set(card.lines.filter((line) => line.group !== null && wanted.has(line.name)).map((line) => line.group));
  const kept = card.lines.filter(
    (line) => ALWAYS.has(line.name) || wanted.has(line.name) || (line.group !== null && groups.has(line.group)),
  );
  return cardText({ lines: kept, eol: card.eol });
}

/** A filter element the service does not support, as `C:supported-filter` names it (RFC 6352 §10.3.1 / §8.6 SHOULD). */
export interface OffendingFilter {
  element: 'prop-filter' | 'param-filter';
  name: string;
}

/** Why a filter cannot be evaluated: the precondition element (403), a sentence, and the offending filter when one is to blame. */
export class FilterRefused extends Error {
  constructor(
    readonly precondition: 'supported-filter' | 'supported-collation',
    detail: string,
    readonly offending?: OffendingFilter,
  ) {
    super(detail);
  }
}

/** Bounds on a filter's size: each card is tested against all of it (docs/carddav.md). */
export const MAX_PROP_FILTERS = 32;
export const MAX_TEXT_MATCHES = 64;
export const MAX_TEXT_MATCH_CHARS = 1024;

const FILTERED_PROPERTIES = new Set(['FN', 'N', 'EMAIL', 'TEL', 'NICKNAME', 'ORG', 'UID']);
const MATCH_TYPES = new Set(['equals', 'contains', 'starts-with', 'ends-with']);
const COLLATIONS = new Set(['i;unicode-casemap', 'i;ascii-casemap', 'i;octet']);

type TextMatch = { value: string; matchType: string; collation: string; negate: boolean };
type PropFilter = { name: string; allOf: boolean; isNotDefined: boolean; matches: TextMatch[] };
/** A compiled `C:filter`: whether a card's text matches it. */
export type CardFilter = (text: string) => boolean;

function fold(value: string, collation: string): string {
  if (collation === 'i;octet') return value;
  if (collation === 'i;ascii-casemap') return value.replace(/[A-Z]+/g, (letters) => letters.toLowerCase());
  return value.normalize('NFKC').toLowerCase();
}

function textMatch(element: XmlElement, within: OffendingFilter): TextMatch {
  const matchType = element.attributes['match-type'] ?? 'contains';
  if (!MATCH_TYPES.has(matchType))
    throw new FilterRefused('supported-filter', `match-type '${shortened(matchType)}' is not supported`, within);
  const collation = element.attributes.collation ?? 'i;unicode-casemap';
  if (!COLLATIONS.has(collation)) throw new FilterRefused('supported-collation', `collation '${shortened(collation)}' is not supported`);
  if (element.text.length > MAX_TEXT_MATCH_CHARS)
    throw new FilterRefused('supported-filter', `A text-match holds ${element.text.length} characters: at most ${MAX_TEXT_MATCH_CHARS}`);
  return { value: element.text, matchType, collation, negate: element.attributes['negate-condition'] === 'yes' };
}

function propFilter(element: XmlElement): PropFilter {
  const name = (element.attributes.name ?? '').toUpperCase();
  const self: OffendingFilter = { element: 'prop-filter', name: shortened(element.attributes.name ?? '') };
  if (!FILTERED_PROPERTIES.has(name))
    throw new FilterRefused('supported-filter', `prop-filter on '${shortened(name)}' is not supported`, self);
  for (const part of element.children) {
    if (part.ns !== CARDDAV || (part.name !== 'text-match' && part.name !== 'is-not-defined')) {
      const offending: OffendingFilter =
        part.ns === CARDDAV && part.name === 'param-filter'
          ? { element: 'param-filter', name: shortened(part.attributes.name ?? '') }
          : self;
      throw new FilterRefused('supported-filter', `${shortened(part.name)} is not supported in a prop-filter`, offending);
    }
  }
  return {
    name,
    allOf: element.attributes.test === 'allof',
    isNotDefined: child(element, CARDDAV, 'is-not-defined') !== undefined,
    matches: children(element, CARDDAV, 'text-match').map((match) => textMatch(match, self)),
  };
}

function matches(value: string, match: TextMatch): boolean {
  const haystack = fold(value, match.collation);
  const needle = fold(match.value, match.collation);
  const found =
    match.matchType === 'equals'
      ? haystack === needle
      : match.matchType === 'starts-with'
        ? haystack.startsWith(needle)
        : match.matchType === 'ends-with'
          ? haystack.endsWith(needle)
          : haystack.includes(needle);
  return found !== match.negate;
}

/** An instance's value as tested: unescaped; a structured value (N, ORG) as written, components joined by `;`. */
function testedValue(line: CardLine): string {
  return componentsOf(line.value).map(unescapeValue).join(';');
}

function propMatches(lines: CardLine[], filter: PropFilter): boolean {
  const instances = lines.filter((line) => line.name === filter.name);
  if (filter.isNotDefined) return instances.length === 0;
  if (instances.length === 0) return false;
  if (filter.matches.length === 0) return true;
  const values = instances.map(testedValue);
  const test = (match: TextMatch) => values.some((value) => matches(value, match));
  return filter.allOf ? filter.matches.every(test) : filter.matches.some(test);
}

/** Compiles a `C:filter`; FilterRefused for what the service does not support (403). */
export function compileFilter(filter: XmlElement | undefined): CardFilter {
  if (!filter) return () => true;
  for (const part of filter.children) {
    if (part.ns !== CARDDAV || part.name !== 'prop-filter')
      throw new FilterRefused('supported-filter', `${shortened(part.name)} is not supported in a filter`);
  }
  const parts = children(filter, CARDDAV, 'prop-filter');
  if (parts.length > MAX_PROP_FILTERS)
    throw new FilterRefused('supported-filter', `The filter holds ${parts.length} prop-filters: at most ${MAX_PROP_FILTERS}`);
  const matchCount = parts.reduce((sum, part) => sum + children(part, CARDDAV, 'text-match').length, 0);
  if (matchCount > MAX_TEXT_MATCHES)
    throw new FilterRefused('supported-filter', `The filter holds ${matchCount} text-matches: at most ${MAX_TEXT_MATCHES}`);
  const filters = parts.map(propFilter);
  const allOf = filter.attributes.test === 'allof';
  if (filters.length === 0) return () => true;
  return (text) => {
    const { lines } = parseCard(text);
    return allOf ? filters.every((f) => propMatches(lines, f)) : filters.some((f) => propMatches(lines, f));
  };
}
