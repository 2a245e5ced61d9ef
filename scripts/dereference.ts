/**
 * The project's one $ref resolver, for codegen, contract:diff and the tests' response checks:
 * Redocly's bundler replaces every $ref of an OpenAPI document by its target, keeping the keywords
 * written beside a $ref (OpenAPI 3.1). A recursive schema becomes a cycle of objects.
 */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

/** `source` (an OpenAPI document in YAML or JSON) with every $ref replaced; throws on a $ref that leads nowhere. */
export async function dereference(source: string): Promise<JsonObject> {
  // Loaded on first use: it takes about a second, which a caller holding a cached result need not pay.
  const { bundle, createConfig, makeDocumentFromString } = await import('@redocly/openapi-core');
  const doc = makeDocumentFromString(source, 'openapi.yaml');
  if (typeof (doc.parsed as JsonObject | null)?.openapi !== 'string') throw new Error('not an OpenAPI document (no `openapi` field)');
  const { bundle: bundled, problems } = await bundle({ doc, config: await createConfig({}), dereference: true });
  const [problem] = problems.filter((p) => p.severity === 'error');
  if (problem) throw new Error(`${problem.message} at ${problem.location[0]?.pointer ?? '#'}`);
  return bundled.parsed as JsonObject;
}
