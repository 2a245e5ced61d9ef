import type { FastifySchemaValidationError, SchemaErrorDataVar } from 'fastify/types/schema.js';
import { Ajv, type Options } from 'ajv';
import addFormats from 'ajv-formats';

// Strict mode stays on; codegen already removed OpenAPI-only keywords. removeAdditional is off so
// unknown properties are refused (422) rather than silently dropped.
const shared: Options = { strict: true, allErrors: false, removeAdditional: false, useDefaults: true };

function makeAjv(options: Options): Ajv {
  const ajv = new Ajv({ ...shared, ...options });
  addFormats.default(ajv);
  return ajv;
}

/** JSON bodies are validated as sent (a number is no string); query and path values arrive as text and are coerced. */
const bodyAjv = makeAjv({ coerceTypes: false });
const textAjv = makeAjv({ coerceTypes: true });

export function compileValidator({ schema, httpPart }: { schema: object; httpPart?: string }) {
  return (httpPart === 'body' ? bodyAjv : textAjv).compile(schema);
}

/** `detail` for the first schema violation, naming the field: `body/email must match format "email"`. */
export function formatSchemaError(errors: FastifySchemaValidationError[], dataVar: SchemaErrorDataVar): Error {
  const [first] = errors;
  if (!first) return new Error(`${dataVar} is invalid`);
  const at = `${dataVar}${first.instancePath}`;
  const params = first.params as Record<string, unknown>;
  if (first.keyword === 'required') return new Error(`${at}/${String(params.missingProperty)} is required`);
  if (first.keyword === 'additionalProperties') {
    return new Error(`${at}/${String(params.additionalProperty)} is not an allowed property`);
  }
  return new Error(`${at} ${first.message ?? 'is invalid'}`);
}
