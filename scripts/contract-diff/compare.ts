/**
 * The rules of `npm run contract:diff`: two dereferenced OpenAPI 3.1 documents in, a classified
 * changelog and a verdict out. Pure functions, so each rule is tested on small in-memory specs.
 *
 * Written here rather than taken from npm because no maintained tool does OpenAPI 3.1 offline:
 * `openapi-diff` refuses 3.1.0, `@pb33f/openapi-changes` and oasdiff are Go binaries fetched at
 * install, and `api-smart-diff` supports 3.0 and calls added security or a changed response
 * `const` non-breaking.
 *
 * Schemas are judged by the set of values they allow, from the SDK client's side: a request schema
 * that allows fewer values refuses requests clients send today, and a response schema that allows
 * more hands clients values they were not written for. Each schema rule says what it does to that
 * set; the side it sits on (request or response) decides whether it breaks.
 *
 * Not compared: servers, webhooks, callbacks, links, and documentation (descriptions, examples).
 */
import { parse } from 'yaml';

type Node = { [key: string]: unknown };
type Side = 'request' | 'response';

/** One changelog line: where, what, and whether it breaks a client written against the old contract. */
export interface Change {
  breaking: boolean;
  location: string;
  message: string;
}

/** A schema difference and, per side, whether it breaks clients. */
interface Delta {
  message: string;
  breaksRequest: boolean;
  breaksResponse: boolean;
}

const narrows = (message: string): Delta => ({ message, breaksRequest: true, breaksResponse: false });
const widens = (message: string): Delta => ({ message, breaksRequest: false, breaksResponse: true });
const breaksBoth = (message: string): Delta => ({ message, breaksRequest: true, breaksResponse: true });
const harmless = (message: string): Delta => ({ message, breaksRequest: false, breaksResponse: false });

const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'] as const;
/** Upper bounds: lowering one allows fewer values. */
const UPPER_BOUNDS = ['maximum', 'exclusiveMaximum', 'maxLength', 'maxItems', 'maxProperties'];
/** Lower bounds: raising one allows fewer values. */
const LOWER_BOUNDS = ['minimum', 'exclusiveMinimum', 'minLength', 'minItems', 'minProperties'];
/** Keywords that only document; changing them changes no value a client sends or receives. */
const ANNOTATIONS = new Set([
  'title', 'description', 'example', 'examples', 'deprecated', 'readOnly', 'writeOnly', '$comment',
  'externalDocs', 'xml', '$id', '$schema', '$anchor', '$defs', 'contentMediaType', 'contentEncoding',
]);
/** Keywords with a rule below; any other keyword that changes is reported as breaking both ways. */
const HANDLED = new Set([
  ...UPPER_BOUNDS, ...LOWER_BOUNDS, 'type', 'nullable', 'enum', 'const', 'multipleOf', 'uniqueItems',
  'pattern', 'format', 'required', 'properties', 'additionalProperties', 'items', 'anyOf', 'oneOf',
  'allOf', 'default',
]);

const isNode = (value: unknown): value is Node => typeof value === 'object' && value !== null && !Array.isArray(value);
const asNode = (value: unknown): Node => (isNode(value) ? value : {});
const show = (value: unknown): string => JSON.stringify(value);

/** Parses a contract and replaces each local $ref by the object it points to; throws on bad YAML or refs. */
export function dereferenceContract(source: string): Node {
  const doc = parse(source) as unknown;
  if (!isNode(doc) || typeof doc.openapi !== 'string') throw new Error('not an OpenAPI document (no `openapi` field)');
  return dereference(doc);
}

/** The node a local JSON pointer such as `#/components/schemas/Item` names. */
function resolvePointer(doc: Node, ref: string): unknown {
  if (!ref.startsWith('#/')) throw new Error(`only local $refs are supported: '${ref}'`);
  let node: unknown = doc;
  for (const part of ref.slice(2).split('/')) {
    const key = decodeURIComponent(part).replace(/~1/g, '/').replace(/~0/g, '~');
    if (typeof node !== 'object' || node === null || !(key in node)) throw new Error(`unresolved $ref '${ref}'`);
    node = (node as Node)[key];
  }
  return node;
}

/**
 * Copies the document with every $ref replaced by one shared copy of its target, so a recursive
 * schema becomes a real cycle whose every object is the same on each lap: the comparison notices
 * the repeat at once and reports a change inside it once. (Redocly's dereference copies the first
 * lap, which reported each such change twice.) A 3.1 $ref with sibling keywords gets them merged in.
 */
function dereference(doc: Node): Node {
  const copies = new Map<object, unknown>();
  const filling = new Set<unknown>();
  const visit = (value: unknown, refs: string[]): unknown => {
    if (typeof value !== 'object' || value === null) return value;
    if (copies.has(value)) return copies.get(value);
    if (isNode(value) && typeof value.$ref === 'string') {
      const ref = value.$ref;
      if (refs.includes(ref)) throw new Error(`$ref '${ref}' refers to itself`);
      const target = visit(resolvePointer(doc, ref), [...refs, ref]);
      const { $ref: _, ...siblings } = value;
      if (Object.keys(siblings).length === 0) {
        copies.set(value, target);
        return target;
      }
      if (filling.has(target)) throw new Error(`$ref '${ref}' with sibling keywords inside a cycle is not supported`);
      const merged = { ...asNode(target), ...asNode(visit(siblings, [])) };
      copies.set(value, merged);
      return merged;
    }
    const copy: Node | unknown[] = Array.isArray(value) ? [] : {};
    copies.set(value, copy);
    filling.add(copy);
    for (const [key, child] of Object.entries(value)) (copy as Node)[key] = visit(child, []);
    filling.delete(copy);
    return copy;
  };
  return visit(doc, []) as Node;
}

/** Structural equality that terminates on the cyclic graphs dereferencing makes. */
function deepEqual(a: unknown, b: unknown, stack: [unknown, unknown][] = []): boolean {
  if (Object.is(a, b)) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (stack.some(([x, y]) => x === a && y === b)) return true;
  const aKeys = Object.keys(a);
  if (aKeys.length !== Object.keys(b).length) return false;
  stack.push([a, b]);
  const equal = aKeys.every((key) => key in b && deepEqual((a as Node)[key], (b as Node)[key], stack));
  stack.pop();
  return equal;
}

/** JSON Schema booleans as objects: `true` allows anything, `false` nothing. */
function asSchema(value: unknown): Node {
  if (value === false) return { not: {} };
  return asNode(value);
}

/** The JSON types a schema allows; null when it allows any. */
function typeSet(schema: Node): Set<string> | null {
  if (schema.type === undefined) return null;
  const types = new Set(Array.isArray(schema.type) ? (schema.type as string[]) : [schema.type as string]);
  if (schema.nullable === true) types.add('null');
  return types;
}

/** Whether a type set allows a type; `number` includes `integer`. */
const covers = (types: Set<string> | null, type: string): boolean =>
  types === null || types.has(type) || (type === 'integer' && types.has('number'));
const showTypes = (types: Set<string> | null): string => (types === null ? 'any' : [...types].join(' | '));

/** The fixed values a schema allows (`const` is an enum of one); null when not restricted. */
function fixedValues(schema: Node): unknown[] | null {
  if (schema.const !== undefined) return [schema.const];
  return Array.isArray(schema.enum) ? schema.enum : null;
}

const join = (path: string, name: string): string => (path ? `${path}.${name}` : name);
const subject = (path: string): string => (path ? `'${path}' ` : '');

/** Differences between two schemas, at `path` inside the part being compared ('' at its root). */
function schemaDeltas(beforeValue: unknown, afterValue: unknown, path: string, stack: [unknown, unknown][]): Delta[] {
  const before = asSchema(beforeValue);
  const after = asSchema(afterValue);
  // A recursive schema compared with itself again: its differences are reported once, above.
  if (stack.some(([b, a]) => b === before && a === after)) return [];
  stack.push([before, after]);
  const deltas = [
    ...typeDeltas(before, after, path),
    ...valueDeltas(before, after, path),
    ...defaultDeltas(before, after, path),
    ...boundDeltas(before, after, path),
    ...stringDeltas(before, after, path),
    ...propertyDeltas(before, after, path, stack),
    ...itemDeltas(before, after, path, stack),
    ...compositionDeltas(before, after, path, stack),
    ...otherDeltas(before, after, path),
  ];
  stack.pop();
  return deltas;
}

function typeDeltas(before: Node, after: Node, path: string): Delta[] {
  const from = typeSet(before);
  const to = typeSet(after);
  const narrowed = from === null ? to !== null : [...from].some((type) => !covers(to, type));
  const widened = to === null ? from !== null : [...to].some((type) => !covers(from, type));
  const change = `from ${showTypes(from)} to ${showTypes(to)}`;
  // A type that loses members refuses values; one that gains members returns unexpected ones.
  if (narrowed && widened) return [breaksBoth(`${subject(path)}type changed ${change}`)];
  if (narrowed) return [narrows(`${subject(path)}type narrowed ${change}`)];
  if (widened) return [widens(`${subject(path)}type widened ${change}`)];
  return [];
}

function valueDeltas(before: Node, after: Node, path: string): Delta[] {
  const deltas: Delta[] = [];
  // A changed const is a different value on both sides.
  if (before.const !== undefined && after.const !== undefined && !deepEqual(before.const, after.const)) {
    return [breaksBoth(`${subject(path)}const changed from ${show(before.const)} to ${show(after.const)}`)];
  }
  const from = fixedValues(before);
  const to = fixedValues(after);
  if (from === null && to !== null) return [narrows(`${subject(path)}now restricted to ${to.map(show).join(', ')}`)];
  if (from !== null && to === null) return [widens(`${subject(path)}no longer restricted to ${from.map(show).join(', ')}`)];
  if (from === null || to === null) return [];
  // A removed value is refused in requests; an added one reaches response readers that switch over
  // the old list (generated SDK unions, exhaustive switches), so we count it as breaking there.
  for (const value of from) if (!to.some((v) => deepEqual(v, value))) deltas.push(narrows(`${subject(path)}enum value ${show(value)} removed`));
  for (const value of to) if (!from.some((v) => deepEqual(v, value))) deltas.push(widens(`${subject(path)}enum value ${show(value)} added`));
  return deltas;
}

function defaultDeltas(before: Node, after: Node, path: string): Delta[] {
  if (before.default === undefined || after.default === undefined || deepEqual(before.default, after.default)) return [];
  // Clients that leave a request value out relied on the old default; in a response it only documents.
  return [{ message: `${subject(path)}default changed from ${show(before.default)} to ${show(after.default)}`, breaksRequest: true, breaksResponse: false }];
}

function boundDeltas(before: Node, after: Node, path: string): Delta[] {
  const deltas: Delta[] = [];
  for (const keyword of [...UPPER_BOUNDS, ...LOWER_BOUNDS]) {
    const from = before[keyword];
    const to = after[keyword];
    if (deepEqual(from, to)) continue;
    const upper = UPPER_BOUNDS.includes(keyword);
    // A new bound refuses values outside it; a dropped bound lets them through.
    if (from === undefined) deltas.push(narrows(`${subject(path)}${keyword} ${show(to)} added`));
    else if (to === undefined) deltas.push(widens(`${subject(path)}${keyword} ${show(from)} removed`));
    else if (typeof from !== 'number' || typeof to !== 'number') deltas.push(breaksBoth(`${subject(path)}${keyword} changed from ${show(from)} to ${show(to)}`));
    else if (upper === to < from) deltas.push(narrows(`${subject(path)}${keyword} ${upper ? 'lowered' : 'raised'} from ${from} to ${to}`));
    else deltas.push(widens(`${subject(path)}${keyword} ${upper ? 'raised' : 'lowered'} from ${from} to ${to}`));
  }
  deltas.push(...multipleOfDeltas(before.multipleOf, after.multipleOf, path));
  // uniqueItems refuses arrays with repeats.
  if (before.uniqueItems !== true && after.uniqueItems === true) deltas.push(narrows(`${subject(path)}items must now be unique`));
  if (before.uniqueItems === true && after.uniqueItems !== true) deltas.push(widens(`${subject(path)}items no longer need to be unique`));
  return deltas;
}

function multipleOfDeltas(from: unknown, to: unknown, path: string): Delta[] {
  if (deepEqual(from, to)) return [];
  if (from === undefined) return [narrows(`${subject(path)}multipleOf ${show(to)} added`)];
  if (to === undefined) return [widens(`${subject(path)}multipleOf ${show(from)} removed`)];
  const change = `${subject(path)}multipleOf changed from ${show(from)} to ${show(to)}`;
  if (typeof from !== 'number' || typeof to !== 'number') return [breaksBoth(change)];
  // Multiples of 10 are multiples of 5: a step that the old one divides allows fewer values, one that divides it more.
  if (to % from === 0) return [narrows(change)];
  if (from % to === 0) return [widens(change)];
  return [breaksBoth(change)];
}

function stringDeltas(before: Node, after: Node, path: string): Delta[] {
  const deltas: Delta[] = [];
  for (const keyword of ['pattern', 'format']) {
    const from = before[keyword];
    const to = after[keyword];
    if (deepEqual(from, to)) continue;
    // Two regular expressions or formats cannot be ordered, so a change counts both ways.
    if (from === undefined) deltas.push(narrows(`${subject(path)}${keyword} ${show(to)} added`));
    else if (to === undefined) deltas.push(widens(`${subject(path)}${keyword} ${show(from)} removed`));
    else deltas.push(breaksBoth(`${subject(path)}${keyword} changed from ${show(from)} to ${show(to)}`));
  }
  return deltas;
}

function propertyDeltas(before: Node, after: Node, path: string, stack: [unknown, unknown][]): Delta[] {
  const deltas: Delta[] = [];
  const from = asNode(before.properties);
  const to = asNode(after.properties);
  const requiredBefore = new Set(Array.isArray(before.required) ? (before.required as string[]) : []);
  const requiredAfter = new Set(Array.isArray(after.required) ? (after.required as string[]) : []);
  for (const name of Object.keys(from)) {
    const where = join(path, name);
    if (name in to) deltas.push(...schemaDeltas(from[name], to[name], where, stack));
    // Response readers lose the field; request senders are refused only when no other property is allowed.
    else deltas.push({ message: `property '${where}' was removed`, breaksRequest: after.additionalProperties === false, breaksResponse: true });
  }
  for (const name of Object.keys(to)) {
    if (name in from) continue;
    // A new required request field is one old clients never send; a new optional one is theirs to use.
    if (requiredAfter.has(name)) deltas.push(narrows(`property '${join(path, name)}' is new and required`));
    else deltas.push(harmless(`property '${join(path, name)}' is new (optional)`));
  }
  const newProperty = (name: string) => name in to && !(name in from);
  // A field clients may leave out becomes mandatory (requests) / a guaranteed field may be absent (responses).
  for (const name of requiredAfter) if (!requiredBefore.has(name) && !newProperty(name)) deltas.push(narrows(`property '${join(path, name)}' is now required`));
  for (const name of requiredBefore) if (!requiredAfter.has(name) && name in to) deltas.push(widens(`property '${join(path, name)}' is no longer required`));
  deltas.push(...additionalPropertyDeltas(before.additionalProperties, after.additionalProperties, path, stack));
  return deltas;
}

function additionalPropertyDeltas(from: unknown, to: unknown, path: string, stack: [unknown, unknown][]): Delta[] {
  // Closing an object refuses extra fields; opening it lets unknown ones reach response readers.
  if (from !== false && to === false) return [narrows(`${subject(path)}additional properties no longer allowed`)];
  if (from === false && to !== false) return [widens(`${subject(path)}additional properties now allowed`)];
  if (from === false || (from === undefined && to === undefined)) return [];
  return schemaDeltas(from, to, join(path, '*'), stack);
}

function itemDeltas(before: Node, after: Node, path: string, stack: [unknown, unknown][]): Delta[] {
  if (before.items === undefined && after.items === undefined) return [];
  return schemaDeltas(before.items, after.items, `${path}[]`, stack);
}

function compositionDeltas(before: Node, after: Node, path: string, stack: [unknown, unknown][]): Delta[] {
  const deltas: Delta[] = [];
  for (const keyword of ['anyOf', 'oneOf', 'allOf'] as const) {
    const from = Array.isArray(before[keyword]) ? (before[keyword] as unknown[]) : [];
    const to = Array.isArray(after[keyword]) ? (after[keyword] as unknown[]) : [];
    if (from.length === to.length) {
      from.forEach((schema, i) => deltas.push(...schemaDeltas(schema, to[i], path, stack)));
      continue;
    }
    const same = (a: unknown, b: unknown) => schemaDeltas(a, b, path, stack).length === 0;
    const removed = from.filter((a) => !to.some((b) => same(a, b))).length;
    const added = to.filter((b) => !from.some((a) => same(a, b))).length;
    // Alternatives (anyOf/oneOf) add allowed values; allOf members add constraints.
    const more = keyword === 'allOf' ? narrows : widens;
    const fewer = keyword === 'allOf' ? widens : narrows;
    if (from.length === 0) deltas.push(narrows(`${subject(path)}${keyword} added`));
    else if (to.length === 0) deltas.push(widens(`${subject(path)}${keyword} removed`));
    else {
      if (removed > 0) deltas.push(fewer(`${subject(path)}${keyword}: ${removed} schema(s) removed`));
      if (added > 0) deltas.push(more(`${subject(path)}${keyword}: ${added} schema(s) added`));
    }
  }
  return deltas;
}

function otherDeltas(before: Node, after: Node, path: string): Delta[] {
  const keywords = new Set([...Object.keys(before), ...Object.keys(after)]);
  const deltas: Delta[] = [];
  for (const keyword of keywords) {
    if (HANDLED.has(keyword) || ANNOTATIONS.has(keyword) || keyword.startsWith('x-')) continue;
    // A keyword without a rule of its own (not, prefixItems, discriminator, ...) cannot be judged: assume the worst.
    if (!deepEqual(before[keyword], after[keyword])) deltas.push(breaksBoth(`${subject(path)}${keyword} changed`));
  }
  return deltas;
}

/** Schema differences as changelog lines, classified for the side the schema sits on. */
function compareSchema(before: unknown, after: unknown, side: Side, location: string): Change[] {
  return schemaDeltas(before, after, '', []).map((delta) => ({
    breaking: side === 'request' ? delta.breaksRequest : delta.breaksResponse,
    location,
    message: delta.message,
  }));
}

interface Operation {
  key: string;
  op: Node;
  parameters: Map<string, Node>;
  security: string[] | null;
}

/** Each requirement object as one readable string, e.g. `bearerAuth` or `oauth(read, write)`. */
function securityAlternatives(requirements: unknown[]): string[] {
  return requirements.map((requirement) =>
    Object.entries(asNode(requirement))
      .map(([scheme, scopes]) => (Array.isArray(scopes) && scopes.length > 0 ? `${scheme}(${[...scopes].sort().join(', ')})` : scheme))
      .sort()
      .join(' + '),
  );
}

/** The operations of a document by `METHOD path`, with path-level parameters and global security applied. */
function operationsOf(doc: Node): Map<string, Operation> {
  const operations = new Map<string, Operation>();
  for (const [path, pathItemValue] of Object.entries(asNode(doc.paths))) {
    const pathItem = asNode(pathItemValue);
    for (const method of METHODS) {
      if (!isNode(pathItem[method])) continue;
      const op = pathItem[method];
      const parameters = new Map<string, Node>();
      // Operation parameters override path-level ones with the same name and location.
      for (const value of [...asArray(pathItem.parameters), ...asArray(op.parameters)]) {
        const parameter = asNode(value);
        parameters.set(parameterKey(parameter), parameter);
      }
      const requirements = (op.security ?? doc.security ?? []) as unknown[];
      const alternatives = securityAlternatives(requirements);
      // No requirement, or an empty one among the alternatives, lets anonymous callers in.
      const security = alternatives.length === 0 || alternatives.includes('') ? null : alternatives;
      operations.set(`${method.toUpperCase()} ${path}`, { key: `${method.toUpperCase()} ${path}`, op, parameters, security });
    }
  }
  return operations;
}

const asArray = (value: unknown): unknown[] => (Array.isArray(value) ? value : []);
/** Header names are case-insensitive; other parameter names are not. */
const parameterKey = (parameter: Node): string =>
  `${String(parameter.in)} ${parameter.in === 'header' ? String(parameter.name).toLowerCase() : String(parameter.name)}`;
const describeParameter = (parameter: Node): string => `${String(parameter.in)} parameter '${String(parameter.name)}'`;
/** A body schema's location, naming the media type only when there is more than one to tell apart. */
const bodyLocation = (base: string, mediaType: string, content: Node): string =>
  Object.keys(content).length > 1 ? `${base} (${mediaType})` : base;
const isSuccess = (status: string): boolean => status.startsWith('2');

function compareSecurity(before: Operation, after: Operation, location: string): Change[] {
  const changes: Change[] = [];
  // Anonymous callers are refused once authentication is required; lifting it refuses no one.
  if (before.security === null && after.security !== null) changes.push({ breaking: true, location, message: `now requires authentication (${after.security.join(' or ')})` });
  if (before.security !== null && after.security === null) changes.push({ breaking: false, location, message: 'no longer requires authentication' });
  if (before.security === null || after.security === null) return changes;
  // Clients hold credentials for the old alternatives only.
  for (const alternative of before.security) if (!after.security.includes(alternative)) changes.push({ breaking: true, location, message: `security requirement '${alternative}' was removed` });
  for (const alternative of after.security) if (!before.security.includes(alternative)) changes.push({ breaking: false, location, message: `security alternative '${alternative}' added` });
  return changes;
}

function compareParameters(before: Operation, after: Operation, location: string): Change[] {
  const changes: Change[] = [];
  const moved = new Set<string>();
  for (const [key, old] of before.parameters) {
    const current = after.parameters.get(key);
    if (!current) {
      const target = [...after.parameters.entries()].find(([k, p]) => !before.parameters.has(k) && p.name === old.name);
      // A moved or removed parameter is sent where the server no longer reads it (and unknown query parameters are refused).
      if (target) {
        moved.add(target[0]);
        changes.push({ breaking: true, location, message: `${describeParameter(old)} moved to ${String(target[1].in)}` });
      } else {
        changes.push({ breaking: true, location, message: `${describeParameter(old)} was removed` });
      }
      continue;
    }
    const what = describeParameter(current);
    // Old clients may leave out a parameter that becomes required.
    if (old.required !== true && current.required === true) changes.push({ breaking: true, location, message: `${what} is now required` });
    if (old.required === true && current.required !== true) changes.push({ breaking: false, location, message: `${what} is no longer required` });
    // Old clients serialize values the old way.
    for (const keyword of ['style', 'explode', 'allowReserved']) {
      if (!deepEqual(old[keyword], current[keyword])) changes.push({ breaking: true, location, message: `${what} ${keyword} changed from ${show(old[keyword])} to ${show(current[keyword])}` });
    }
    if (old.deprecated !== true && current.deprecated === true) changes.push({ breaking: false, location, message: `${what} is now deprecated` });
    changes.push(...compareSchema(parameterSchema(old), parameterSchema(current), 'request', `${location} ${what}`));
  }
  for (const [key, current] of after.parameters) {
    if (before.parameters.has(key) || moved.has(key)) continue;
    // Old clients never send a new parameter: fine unless it is required.
    const required = current.required === true;
    changes.push({ breaking: required, location, message: `${describeParameter(current)} is new${required ? ' and required' : ' (optional)'}` });
  }
  return changes;
}

/** A parameter's schema, from `schema` or from its single `content` entry. */
function parameterSchema(parameter: Node): unknown {
  if (parameter.schema !== undefined) return parameter.schema;
  const [media] = Object.values(asNode(parameter.content));
  return asNode(media).schema;
}

function compareRequestBody(beforeValue: unknown, afterValue: unknown, location: string): Change[] {
  if (beforeValue === undefined && afterValue === undefined) return [];
  const before = asNode(beforeValue);
  const after = asNode(afterValue);
  // Old clients send no body: fine unless one is required.
  if (beforeValue === undefined) {
    const required = after.required === true;
    return [{ breaking: required, location, message: `request body is new${required ? ' and required' : ' (optional)'}` }];
  }
  // Old clients send data the operation no longer reads.
  if (afterValue === undefined) return [{ breaking: true, location, message: 'request body was removed' }];
  const changes: Change[] = [];
  if (before.required !== true && after.required === true) changes.push({ breaking: true, location, message: 'request body is now required' });
  if (before.required === true && after.required !== true) changes.push({ breaking: false, location, message: 'request body is no longer required' });
  const from = asNode(before.content);
  const to = asNode(after.content);
  for (const mediaType of Object.keys(from)) {
    // Old clients sending a media type that is gone get 415.
    if (!(mediaType in to)) changes.push({ breaking: true, location, message: `request body media type '${mediaType}' was removed` });
    else changes.push(...compareSchema(asNode(from[mediaType]).schema, asNode(to[mediaType]).schema, 'request', bodyLocation(`${location} request body`, mediaType, to)));
  }
  for (const mediaType of Object.keys(to)) if (!(mediaType in from)) changes.push({ breaking: false, location, message: `request body media type '${mediaType}' added` });
  return changes;
}

function compareResponses(beforeValue: unknown, afterValue: unknown, location: string): Change[] {
  const changes: Change[] = [];
  const from = asNode(beforeValue);
  const to = asNode(afterValue);
  for (const status of Object.keys(from)) {
    // Clients are written for the success statuses; a documented error that is gone just stops happening.
    if (!(status in to)) changes.push({ breaking: isSuccess(status), location, message: `response ${status} was removed` });
    else changes.push(...compareResponse(asNode(from[status]), asNode(to[status]), `${location} response ${status}`));
  }
  // A new status is another documented outcome; clients already handle unexpected ones generically.
  for (const status of Object.keys(to)) if (!(status in from)) changes.push({ breaking: false, location, message: `response ${status} added` });
  return changes;
}

function compareResponse(before: Node, after: Node, location: string): Change[] {
  const changes: Change[] = [];
  const byName = (headers: unknown) => new Map(Object.entries(asNode(headers)).map(([name, header]) => [name.toLowerCase(), { name, header: asNode(header) }]));
  const headersBefore = byName(before.headers);
  const headersAfter = byName(after.headers);
  for (const [key, { name, header }] of headersBefore) {
    const current = headersAfter.get(key)?.header;
    // Only a guaranteed header is one clients may read unconditionally.
    if (!current) changes.push({ breaking: header.required === true, location, message: `header '${name}' was removed` });
    else {
      if (header.required === true && current.required !== true) changes.push({ breaking: true, location, message: `header '${name}' is no longer required` });
      if (header.required !== true && current.required === true) changes.push({ breaking: false, location, message: `header '${name}' is now required` });
      changes.push(...compareSchema(header.schema, current.schema, 'response', `${location} header '${name}'`));
    }
  }
  for (const [key, { name }] of headersAfter) if (!headersBefore.has(key)) changes.push({ breaking: false, location, message: `header '${name}' added` });
  const from = asNode(before.content);
  const to = asNode(after.content);
  for (const mediaType of Object.keys(from)) {
    // Clients parse the media type they were promised.
    if (!(mediaType in to)) changes.push({ breaking: true, location, message: `media type '${mediaType}' was removed` });
    else changes.push(...compareSchema(asNode(from[mediaType]).schema, asNode(to[mediaType]).schema, 'response', bodyLocation(`${location} body`, mediaType, to)));
  }
  for (const mediaType of Object.keys(to)) if (!(mediaType in from)) changes.push({ breaking: false, location, message: `media type '${mediaType}' added` });
  return changes;
}

function compareOperation(before: Operation, after: Operation): Change[] {
  const location = after.key;
  const changes: Change[] = [];
  // SDKs name their methods after the operationId.
  if (before.op.operationId !== after.op.operationId) {
    changes.push({ breaking: true, location, message: `operationId changed from ${show(before.op.operationId)} to ${show(after.op.operationId)}` });
  }
  if (before.op.deprecated !== true && after.op.deprecated === true) changes.push({ breaking: false, location, message: 'operation is now deprecated' });
  changes.push(...compareSecurity(before, after, location));
  changes.push(...compareParameters(before, after, location));
  changes.push(...compareRequestBody(before.op.requestBody, after.op.requestBody, location));
  changes.push(...compareResponses(before.op.responses, after.op.responses, location));
  return changes;
}

function compareSecuritySchemes(before: Node, after: Node): Change[] {
  const changes: Change[] = [];
  const from = asNode(asNode(before.components).securitySchemes);
  const to = asNode(asNode(after.components).securitySchemes);
  const withoutDescription = (scheme: unknown) => ({ ...asNode(scheme), description: undefined });
  for (const name of Object.keys(from)) {
    const location = `security scheme '${name}'`;
    // Credentials clients hold for the old scheme stop working.
    if (!(name in to)) changes.push({ breaking: true, location, message: 'was removed' });
    else if (!deepEqual(withoutDescription(from[name]), withoutDescription(to[name]))) changes.push({ breaking: true, location, message: 'changed' });
  }
  for (const name of Object.keys(to)) if (!(name in from)) changes.push({ breaking: false, location: `security scheme '${name}'`, message: 'added' });
  return changes;
}

/** Every difference between two dereferenced contracts that a client could notice, in document order. */
export function compareContracts(before: Node, after: Node): Change[] {
  const changes: Change[] = [];
  const operationsBefore = operationsOf(before);
  const operationsAfter = operationsOf(after);
  const idsAfter = new Map([...operationsAfter.values()].map((operation) => [operation.op.operationId, operation]));
  const matched = new Set<string>();
  for (const [key, old] of operationsBefore) {
    const moved = old.op.operationId === undefined ? undefined : idsAfter.get(old.op.operationId);
    const current = operationsAfter.get(key) ?? (moved && !operationsBefore.has(moved.key) ? moved : undefined);
    if (!current) {
      // Clients call it by method and path.
      changes.push({ breaking: true, location: key, message: 'operation was removed' });
      continue;
    }
    matched.add(current.key);
    // Same operationId at another method or path: clients still call the old URL.
    if (current.key !== key) changes.push({ breaking: true, location: key, message: `operation moved to ${current.key}` });
    changes.push(...compareOperation(old, current));
  }
  for (const key of operationsAfter.keys()) if (!matched.has(key)) changes.push({ breaking: false, location: key, message: 'operation added' });
  changes.push(...compareSecuritySchemes(before, after));
  // Media types sharing one schema report the same line once.
  const seen = new Set<string>();
  return changes.filter((change) => !seen.has(formatChange(change)) && Boolean(seen.add(formatChange(change))));
}

export const formatChange = (change: Change): string => `${change.location}: ${change.message}`;

/** The leading number of a version such as `2.1.0` or `v3`; null when there is none. */
function majorOf(version: unknown): number | null {
  const match = /^v?(\d+)(\.|$)/.exec(String(version));
  return match ? Number(match[1]) : null;
}

export interface Verdict {
  exitCode: 0 | 1;
  line: string;
}

/** Pass unless something breaks and `info.version`'s major did not go up. */
export function verdict(changes: Change[], versionBefore: unknown, versionAfter: unknown): Verdict {
  const breaking = changes.filter((change) => change.breaking).length;
  const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;
  if (changes.length === 0) return { exitCode: 0, line: 'Verdict: pass (no changes)' };
  if (breaking === 0) return { exitCode: 0, line: `Verdict: pass (${plural(changes.length, 'compatible change')}, nothing breaks)` };
  const [from, to] = [majorOf(versionBefore), majorOf(versionAfter)];
  if (from !== null && to !== null && to > from) {
    return { exitCode: 0, line: `Verdict: pass (${plural(breaking, 'breaking change')} accepted: info.version's major was bumped, ${String(versionBefore)} → ${String(versionAfter)})` };
  }
  const next = from === null ? 'a new major version' : `${from + 1}.0.0`;
  return {
    exitCode: 1,
    line: `Verdict: FAIL (${plural(breaking, 'breaking change')}, and info.version ${show(versionAfter)} is not a new major version: undo them, or set info.version to ${next} if the break is deliberate)`,
  };
}

/** The whole printout: what was compared, the changelog grouped by kind, the verdict. */
export function formatReport(changes: Change[], result: Verdict, header: string): string {
  const group = (title: string, members: Change[]) => [
    `${title} (${members.length}):`,
    ...(members.length === 0 ? ['  none'] : members.map((change) => `  ${formatChange(change)}`)),
    '',
  ];
  const changelog = changes.length === 0
    ? ['no changes', '']
    : [...group('Breaking', changes.filter((c) => c.breaking)), ...group('Compatible', changes.filter((c) => !c.breaking))];
  return [header, '', ...changelog, result.line, ''].join('\n');
}
