/**
 * The rules of `npm run contract:diff`: api-smart-diff compares two dereferenced OpenAPI 3.1
 * documents and classifies each change; this file configures it where its defaults do not say what
 * breaks a client of this service, and prints the changelog and the verdict.
 *
 * Request schemas are judged by what clients send and response schemas, reversed, by what they
 * read: a request that allows fewer values, or a response that allows more, breaks a client.
 * Compared: the operations (every $ref inlined), the global security and the security schemes.
 * Documentation (descriptions, examples, tags) and `x-` extensions are not.
 */
import {
  allBreaking,
  apiCompare,
  breaking,
  getParentContext,
  jsonSchemaMergeAllOf,
  jsonSchemaRules,
  nonBreaking,
  openapi3Rules,
  operationSecurityClassifyRule,
  propertyClassifyRule,
  requiredMappingResolver,
  reverseClassifyRuleTransformer,
  transformComapreRules,
  transformJsonSchema,
  transformJsonSchemaCombiners,
  unclassified,
  type ClassifyRule,
  type CompareRules,
  type CompareTransformResolver,
  type Diff,
  type DiffTypeClassifier,
} from 'api-smart-diff';
import type { Json, JsonObject } from '../dereference.js';

/** One changelog line: where, what, and whether it breaks a client written against the old contract. */
export interface Change {
  breaking: boolean;
  location: string;
  message: string;
}

const isObject = (value: unknown): value is JsonObject => typeof value === 'object' && value !== null && !Array.isArray(value);
const asTypeList = (schema: unknown) => (isObject(schema) && typeof schema.type === 'string' ? { ...schema, type: [schema.type] } : schema);

/** `type: string` read as `type: [string]`, so a type that becomes nullable is one type added, on either side. */
const typesAsLists: CompareTransformResolver = (before, after) => [asTypeList(before), asTypeList(after)];

/** A property of a request body (the first three) or, read the other way, of a response (the last three). */
const propertyRule: ClassifyRule = [
  propertyClassifyRule[0],
  // Clients still send a removed property, and it is refused where no other properties are allowed.
  ({ before }) => (getParentContext(before, '', 'additionalProperties')?.value === false ? breaking : nonBreaking),
  unclassified,
  nonBreaking,
  // Clients read a property that is no longer there, even an optional one.
  breaking,
  unclassified,
];

/** JSON Schema rules for what clients send; `reversed` for what they read. */
function schemaRules(reversed: boolean): CompareRules {
  const rules: CompareRules = jsonSchemaRules({
    version: '2020-12',
    notMergeAllOf: true,
    baseRules: {
      transform: [transformJsonSchemaCombiners(), transformJsonSchema('2020-12'), jsonSchemaMergeAllOf('2020-12'), typesAsLists],
      // Types as a set: one more allows more values, one fewer allows fewer (integer to number is both).
      '/type': {
        $: [breaking, nonBreaking, breaking],
        mapping: requiredMappingResolver,
        '/*': { $: [nonBreaking, breaking, breaking] },
      },
      '/properties': { '/*': () => ({ ...rules, $: propertyRule }) },
    },
  });
  return reversed ? transformComapreRules(rules, reverseClassifyRuleTransformer) : rules;
}

/** Whether security requirements let anonymous callers in: none at all, or an empty one among them. */
const anonymous = (security: unknown) =>
  Array.isArray(security) &&
  (security.length === 0 || security.some((required) => isObject(required) && Object.keys(required).length === 0));
/** The operation's security, or the document's where it has none. */
const effectiveSecurity = ({ parent, root }: Parameters<DiffTypeClassifier>[0]['before']) =>
  (parent as JsonObject | undefined)?.security ?? (root as JsonObject).security ?? [];

/** Anonymous clients are refused once an operation requires authentication (the library misses it when the global security is empty). */
const securityRule = operationSecurityClassifyRule.map((libraryRule): DiffTypeClassifier => (ctx) => {
  if (anonymous(effectiveSecurity(ctx.before)) && !anonymous(effectiveSecurity(ctx.after))) return breaking;
  return typeof libraryRule === 'function' ? libraryRule(ctx) : libraryRule;
}) as ClassifyRule;

/** `rules` with the rule at `path` (rule keys such as '/paths' and '/*') replaced by `change(rule)`. */
function patch(rules: CompareRules, [key, ...rest]: `/${string}`[], change: (rule: CompareRules) => CompareRules): CompareRules {
  if (key === undefined) return change(rules);
  const child = rules[key];
  const patched =
    typeof child === 'function' ? (ctx: Parameters<typeof child>[0]) => patch(child(ctx), rest, change) : patch(child ?? {}, rest, change);
  return { ...rules, [key]: patched };
}

function contractRules(): CompareRules {
  const request = schemaRules(false);
  const response = schemaRules(true);
  const operation = ['/paths', '/*', '/*'] as const;
  const edits: [`/${string}`[], (rule: CompareRules) => CompareRules][] = [
    // SDKs name their methods after the operationId.
    [[...operation, '/operationId'], () => ({ $: allBreaking })],
    [[...operation, '/security'], (rule) => ({ ...rule, $: securityRule })],
    [[...operation, '/parameters', '/*', '/schema'], () => ({ ...request, $: allBreaking })],
    [['/paths', '/*', '/parameters', '/*', '/schema'], () => ({ ...request, $: allBreaking })],
    [[...operation, '/requestBody', '/content', '/*', '/schema'], () => ({ ...request, $: allBreaking })],
    [[...operation, '/responses', '/*', '/content', '/*', '/schema'], () => ({ ...response, $: allBreaking })],
    // Clients may rely on a header that was required, and read its values.
    [
      [...operation, '/responses', '/*', '/headers', '/*'],
      (rule) => ({
        ...rule,
        '/required': { $: [nonBreaking, breaking, ({ after }) => (after.value === true ? nonBreaking : breaking)] },
        '/schema': { ...response, $: allBreaking },
      }),
    ],
    // A new scheme asks nothing of anyone until an operation requires it; clients hold credentials for the old ones.
    [['/components', '/securitySchemes', '/*'], (rule) => ({ ...rule, $: [nonBreaking, breaking, breaking] })],
  ];
  return edits.reduce((rules, [path, change]) => patch(rules, path, change), openapi3Rules());
}

/**
 * A copy of `value` in which an object met again inside itself (a recursive schema) is a $ref to
 * where it was met first: the library follows such a $ref once, where it would walk the cycle forever.
 */
function withCyclesAsRefs(value: Json, pointer = '#', ancestors = new Map<object, string>()): Json {
  if (typeof value !== 'object' || value === null) return value;
  const first = ancestors.get(value);
  if (first !== undefined) return { $ref: first };
  ancestors.set(value, pointer);
  const child = (key: string | number, item: Json) =>
    withCyclesAsRefs(item, `${pointer}/${String(key).replace(/~/g, '~0').replace(/\//g, '~1')}`, ancestors);
  const copy = Array.isArray(value)
    ? value.map((item, i) => child(i, item))
    : Object.fromEntries(Object.entries(value).map(([key, item]) => [key, child(key, item)]));
  ancestors.delete(value);
  return copy;
}

/** What a client can see of a dereferenced contract: components are compared where operations use them. */
function surface(contract: JsonObject): Json {
  const { openapi = null, paths = {}, security = [], components } = contract;
  const { securitySchemes = {} } = (components ?? {}) as JsonObject;
  return withCyclesAsRefs({ openapi, paths, security, components: { securitySchemes } });
}

/** Documentation on the path (an `x-` extension, an example), unless it is the name of a property or header. */
const isDocumentation = (path: Diff['path']) =>
  path.some((key, i) => /^(x-|examples?$)/.test(String(key)) && !['properties', 'headers'].includes(String(path[i - 1])));

const at = (document: Json, path: Diff['path']) =>
  path.reduce<Json | undefined>((node, key) => (node as Record<string | number, Json> | undefined)?.[key], document);
const show = (value: unknown) => (typeof value === 'object' && value !== null ? '' : ` ${JSON.stringify(value)}`);

/**
 * A diff as one line: `POST /items/ request body (application/json) name.maxLength: 50 → 20`.
 * `merged` is the library's merge of both documents, which its paths index (parameters by name).
 */
function describe(diff: Diff, merged: Json): Omit<Change, 'breaking'> {
  const path = diff.path.map(String);
  const words: string[] = [];
  const schema: string[] = [];
  let i = 0;
  if (path[0] === 'paths' && path.length > 1) {
    const method = path[2] !== undefined && path[2] !== 'parameters' ? path[2] : '';
    words.push(`${method.toUpperCase()} ${path[1]}`.trim());
    i = method ? 3 : 2;
  }
  for (; i < path.length; i++) {
    const [key, next] = [path[i]!, path[i + 1]];
    const index = /^\d+$/.test(key);
    // An enum value, a type or a required name is shown as the value, not by its place in the list.
    if (index && ['enum', 'type', 'required'].includes(path[i - 1]!)) continue;
    if (key === 'properties' && next !== undefined) schema.push(path[++i]!);
    else if (key === 'items') schema.push('[]');
    else if (schema.length > 0 || (next === undefined && !index)) schema.push(key);
    else if (key === 'parameters' && next !== undefined) {
      const parameter = at(merged, diff.path.slice(0, i + 2)) as JsonObject;
      words.push(`${String(parameter.in)} parameter '${String(parameter.name)}'`);
      i++;
    } else if (key === 'requestBody') words.push('request body');
    else if (key === 'responses' && next !== undefined) words.push(`response ${path[++i]}`);
    else if (key === 'content' && next !== undefined) words.push(`(${path[++i]})`);
    else if (key === 'headers' && next !== undefined) words.push(`header '${path[++i]}'`);
    else if (index) words.push(`${words.pop() ?? ''}[${key}]`);
    else if (key !== 'schema') words.push(key);
  }
  if (schema.length > 0) words.push(schema.join('.'));
  const message = {
    add: `added${show(diff.after)}`,
    remove: `removed${show(diff.before)}`,
    replace: `${JSON.stringify(diff.before)} → ${JSON.stringify(diff.after)}`,
    rename: `renamed ${JSON.stringify(diff.before)} → ${JSON.stringify(diff.after)}`,
  }[diff.action];
  return { location: words.join(' '), message };
}

/** Every difference between two dereferenced contracts that a client could notice, in document order. */
export function compareContracts(before: JsonObject, after: JsonObject): Change[] {
  const { diffs, merged } = apiCompare(surface(before), surface(after), { rules: contractRules() });
  const changes: Change[] = [];
  for (const diff of diffs) {
    if (diff.type === 'annotation' || isDocumentation(diff.path)) continue;
    const change = { breaking: diff.type === 'breaking' || diff.type === 'unclassified', ...describe(diff, merged) };
    // A change no rule classifies may break someone: it counts as breaking, and says so.
    if (diff.type === 'unclassified') change.message += ' (unclassified, counted as breaking)';
    changes.push(change);
  }
  // The same change reached twice (two media types sharing one schema) is one line.
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
  const breakingCount = changes.filter((change) => change.breaking).length;
  const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`;
  if (changes.length === 0) return { exitCode: 0, line: 'Verdict: pass (no changes)' };
  if (breakingCount === 0) return { exitCode: 0, line: `Verdict: pass (${plural(changes.length, 'compatible change')}, nothing breaks)` };
  const [from, to] = [majorOf(versionBefore), majorOf(versionAfter)];
  const breaks = plural(breakingCount, 'breaking change');
  const bump = `${String(versionBefore)} → ${String(versionAfter)}`;
  if (from !== null && to !== null && to > from) {
    return { exitCode: 0, line: `Verdict: pass (${breaks} accepted: info.version's major was bumped, ${bump})` };
  }
  const next = from === null ? 'a new major version' : `${from + 1}.0.0`;
  const why = `info.version ${JSON.stringify(versionAfter)} is not a new major version`;
  return {
    exitCode: 1,
    line: `Verdict: FAIL (${breaks}, and ${why}: undo them, or set info.version to ${next} if the break is deliberate)`,
  };
}

/** The whole printout: what was compared, the changelog grouped by kind, the verdict. */
export function formatReport(changes: Change[], result: Verdict, header: string): string {
  const group = (title: string, members: Change[]) => [
    `${title} (${members.length}):`,
    ...(members.length === 0 ? ['  none'] : members.map((change) => `  ${formatChange(change)}`)),
    '',
  ];
  const changelog =
    changes.length === 0
      ? ['no changes', '']
      : [
          ...group(
            'Breaking',
            changes.filter((c) => c.breaking),
          ),
          ...group(
            'Compatible',
            changes.filter((c) => !c.breaking),
          ),
        ];
  return [header, '', ...changelog, result.line, ''].join('\n');
}
