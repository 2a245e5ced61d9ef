import type { FastifySchemaValidationError, SchemaErrorDataVar } from 'fastify/types/schema.js';
import { _, Ajv, type ErrorObject, type Options } from 'ajv';
import addFormats from 'ajv-formats';

// Strict mode stays on; codegen already removed OpenAPI-only keywords. removeAdditional is off so
// unknown properties are refused (422) rather than silently dropped.
const shared: Options = { strict: true, allErrors: false, removeAdditional: false, useDefaults: true };

function makeAjv(options: Options): Ajv {
  const ajv = new Ajv({ ...shared, ...options });
  addFormats.default(ajv);
  // Codegen writes `{ binary: true }` for `type: string, format: binary`: bytes (a raw body, or a
  // multipart file part), which JSON Schema has no type for. Text sent where a file belongs fails.
  ajv.addKeyword({
    keyword: 'binary',
    schemaType: 'boolean',
    code(cxt) {
      cxt.fail(_`${cxt.schema as boolean} && !(${cxt.data} instanceof Uint8Array)`);
    },
    error: { message: 'must be a file' },
  });
  return ajv;
}

const bodyAjv = makeAjv({ coerceTypes: false });
const textAjv = makeAjv({ coerceTypes: true });

type Validate = ((data: unknown) => boolean) & { errors?: ErrorObject[] | null };
type IntegerBounds = { minimum?: number; maximum?: number };

/** The integer properties of a query or path schema, with their bounds. */
function integerProperties(schema: { properties?: Record<string, IntegerBounds & { type?: unknown }> }): [string, IntegerBounds][] {
  return Object.entries(schema.properties ?? {}).filter(([, property]) => property.type === 'integer');
}

/** Why a query or path value is no usable integer, as an Ajv error; null when Ajv may take it. */
function integerError(name: string, value: string, { minimum, maximum }: IntegerBounds): ErrorObject | null {
  const at = { instancePath: `/${name}`, schemaPath: `#/properties/${name}` };
  if (!/^-?\d+$/.test(value)) return { ...at, keyword: 'type', params: { type: 'integer' }, message: 'must be integer' };
  if (Number.isFinite(Number(value))) return null;
  // So many digits that they read as Infinity, which Ajv would not hold to a bound.
  if (value.startsWith('-') && minimum !== undefined)
    return { ...at, keyword: 'minimum', params: { comparison: '>=', limit: minimum }, message: `must be >= ${minimum}` };
  if (maximum !== undefined)
    return { ...at, keyword: 'maximum', params: { comparison: '<=', limit: maximum }, message: `must be <= ${maximum}` };
  return { ...at, keyword: 'type', params: { type: 'integer' }, message: 'must be integer' };
}

/**
 * Body schemas validate JSON as sent. Query and path schemas coerce text, but integers must be
 * written in decimal digits and be finite: Ajv's coercion would also read `0x10`, `1.0` and
 * `1e400`, and lets the last one through as an unbounded Infinity.
 */
export function compileValidator({ schema, httpPart }: { schema: object; httpPart?: string }): Validate {
  if (httpPart === 'body') return bodyAjv.compile(schema);
  const validate = textAjv.compile(schema);
  const integers = integerProperties(schema);
  if (integers.length === 0) return validate;
  const decimalIntegers: Validate = (data) => {
    const values = data as Record<string, unknown>;
    for (const [name, bounds] of integers) {
      const value = values[name];
      const error = typeof value === 'string' ? integerError(name, value, bounds) : null;
      if (error) {
        decimalIntegers.errors = [error];
        return false;
      }
    }
    const valid = validate(data);
    decimalIntegers.errors = validate.errors;
    return valid;
  };
  return decimalIntegers;
}

/**
 * `detail` for the first schema violation, naming the field: `body/email must match format "email"`.
 * A header is named as openapi.yaml places it (`in: header`): `header/idempotency-key`.
 */
export function formatSchemaError(errors: FastifySchemaValidationError[], dataVar: SchemaErrorDataVar): Error {
  const part = dataVar === 'headers' ? 'header' : dataVar;
  const [first] = errors;
  if (!first) return new Error(`${part} is invalid`);
  const at = `${part}${first.instancePath}`;
  const params = first.params;
  if (first.keyword === 'required') return new Error(`${at}/${String(params.missingProperty)} is required`);
  if (first.keyword === 'additionalProperties') {
    return new Error(`${at}/${String(params.additionalProperty)} is not an allowed property`);
  }
  return new Error(`${at} ${first.message ?? 'is invalid'}`);
}
