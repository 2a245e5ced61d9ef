/**
 * Checks a response against openapi.yaml independently of the app's generated code: the operation
 * is found by method and path template, the status must be documented, required headers present,
 * documented headers well-formed, and a JSON body valid against the response schema.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { Readable } from 'node:stream';
import redocly from '@redocly/openapi-core/package.json' with { type: 'json' };
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import type { FastifyInstance } from 'fastify';
import { parse } from 'yaml';
import { dereference, type Json, type JsonObject } from '../scripts/dereference.js';

/** What a test received, as seen by an onSend hook. */
export interface ObservedResponse {
  method: string;
  /** The request URL, query string included. */
  url: string;
  statusCode: number;
  headers: Record<string, unknown>;
  /** The serialized payload; null when there is none. */
  payload: string | Buffer | null;
}

export interface SpecOperation {
  operationId: string;
  method: string;
  /** The path template as written in the spec, e.g. `/api/contacts/{contact_id}`. */
  path: string;
  operation: JsonObject;
}

// Keywords that only document, and that Ajv's strict mode rejects.
const DOC_KEYWORDS = new Set(['example', 'examples', 'xml', 'externalDocs', 'discriminator']);
const METHODS = ['get', 'put', 'post', 'patch', 'delete', 'head', 'options', 'trace'];
const SPEC_FILE = new URL('../openapi.yaml', import.meta.url);
const CACHE_DIR = new URL('../node_modules/.cache/dereferenced-openapi/', import.meta.url);

/** Reads and parses the project's openapi.yaml, $refs as written. */
export function loadSpec(): JsonObject {
  return parse(readFileSync(SPEC_FILE, 'utf8')) as JsonObject;
}

/** Every operation of the spec with its method (upper case) and path template. */
export function specOperations(spec: JsonObject): SpecOperation[] {
  const operations: SpecOperation[] = [];
  for (const [path, item] of Object.entries(spec.paths as JsonObject)) {
    for (const method of METHODS) {
      const operation = (item as JsonObject)[method] as JsonObject | undefined;
      if (operation) operations.push({ operationId: operation.operationId as string, method: method.toUpperCase(), path, operation });
    }
  }
  return operations;
}

export class SpecValidator {
  readonly #ajv: Ajv2020;
  readonly #operations: { op: SpecOperation; pattern: RegExp }[];
  readonly #compiled = new Map<string, ValidateFunction>();

  /** `spec`: the contract with its $refs replaced (scripts/dereference.ts). */
  constructor(spec: JsonObject) {
    this.#ajv = new Ajv2020({ strict: true, allErrors: true, strictRequired: false });
    addFormats.default(this.#ajv);
    this.#operations = specOperations(spec).map((op) => ({
      op,
      pattern: new RegExp(`^${op.path.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{[^}]+\}/g, '[^/]+')}/?$`),
    }));
  }

  /** The spec operation serving `method` on `url`, if any. */
  find(method: string, url: string): SpecOperation | undefined {
    const path = url.split('?', 1)[0] ?? '';
    // The service, as openapi.yaml says, takes every path with or without its trailing slash.
    const variants = [path, path.endsWith('/') ? path.slice(0, -1) : `${path}/`];
    const matches = this.#operations.filter((o) => o.op.method === method.toUpperCase() && variants.some((p) => o.pattern.test(p)));
    // A literal path (`/api/contacts/get-upcoming-birthday`) wins over a template (`/api/contacts/{contact_id}`).
    return (matches.find((o) => !o.op.path.includes('{')) ?? matches[0])?.op;
  }

  /** Every way `response` departs from the operation's documented response; [] when it conforms. */
  check(op: SpecOperation, response: ObservedResponse): string[] {
    const where = `${response.method} ${response.url} → ${response.statusCode}`;
    const responses = op.operation.responses as JsonObject;
    const status = String(response.statusCode);
    const documented = responses[status] ?? responses[`${status[0]}XX`] ?? responses.default;
    if (documented === undefined) return [`${where}: status ${status} is not documented for ${op.operationId}`];
    const spec = documented as JsonObject;
    const problems: string[] = [];

    const headers = this.#lowerCaseHeaders(response.headers);
    for (const [name, documentedHeader] of Object.entries((spec.headers ?? {}) as JsonObject)) {
      const header = documentedHeader as JsonObject;
      const value = headers[name.toLowerCase()];
      if (value === undefined) {
        if (header.required === true) problems.push(`${where}: required header ${name} is missing`);
        continue;
      }
      const schema = header.schema as JsonObject | undefined;
      if (!schema) continue;
      const validate = this.#compile(`${op.operationId} ${status} header ${name}`, schema);
      if (!validate(this.#headerValue(value, schema))) {
        problems.push(`${where}: header ${name}: '${value}' ${this.#ajv.errorsText(validate.errors, { dataVar: name })}`);
      }
    }

    const content = spec.content as JsonObject | undefined;
    const payload = response.payload === null ? '' : response.payload.toString();
    if (!content) {
      if (payload !== '') problems.push(`${where}: documented without a body, but has one`);
      return problems;
    }
    const contentType =
      String(headers['content-type'] ?? '')
        .split(';', 1)[0]
        ?.trim()
        .toLowerCase() ?? '';
    const media = content[contentType] as JsonObject | undefined;
    if (!media) {
      problems.push(`${where}: content type '${contentType}' is not documented (${Object.keys(content).join(', ')})`);
      return problems;
    }
    if (contentType !== 'application/json' || !media.schema) return problems;
    let body: unknown;
    try {
      body = JSON.parse(payload);
    } catch {
      return [...problems, `${where}: body is not JSON: ${payload.slice(0, 200)}`];
    }
    const validate = this.#compile(`${op.operationId} ${status} body`, media.schema);
    if (!validate(body)) {
      problems.push(`${where}: body ${this.#ajv.errorsText(validate.errors, { dataVar: 'body' })}: ${payload.slice(0, 300)}`);
    }
    return problems;
  }

  #compile(key: string, schema: Json): ValidateFunction {
    let validate = this.#compiled.get(key);
    if (!validate) {
      validate = this.#ajv.compile(this.#toJsonSchema(schema) as object);
      this.#compiled.set(key, validate);
    }
    return validate;
  }

  /** Drops documentation-only keywords (never a property that happens to share their name). */
  #toJsonSchema(node: Json): Json {
    if (Array.isArray(node)) return node.map((item) => this.#toJsonSchema(item));
    if (node === null || typeof node !== 'object') return node;
    const out: JsonObject = {};
    for (const [key, value] of Object.entries(node)) {
      if (DOC_KEYWORDS.has(key) || key.startsWith('x-')) continue;
      out[key] =
        key === 'properties' || key === 'patternProperties' || key === '$defs'
          ? Object.fromEntries(Object.entries(value as JsonObject).map(([name, schema]) => [name, this.#toJsonSchema(schema)]))
          : this.#toJsonSchema(value);
    }
    return out;
  }

  /** A header arrives as text; read it as the type its schema declares. */
  #headerValue(value: string, schema: JsonObject): unknown {
    const types = ([] as Json[]).concat(schema.type ?? []);
    if ((types.includes('integer') || types.includes('number')) && /^-?\d+(\.\d+)?$/.test(value)) return Number(value);
    if (types.includes('boolean') && (value === 'true' || value === 'false')) return value === 'true';
    return value;
  }

  #lowerCaseHeaders(headers: Record<string, unknown>): Record<string, string> {
    const out: Record<string, string> = {};
    for (const [name, value] of Object.entries(headers)) {
      if (value !== undefined) out[name.toLowerCase()] = Array.isArray(value) ? value.join(', ') : String(value);
    }
    return out;
  }
}

/**
 * openapi.yaml dereferenced, cached by the hash of its text and of Redocly's version: loading Redocly
 * takes about a second, which every test file would pay.
 */
async function dereferencedSpec(): Promise<JsonObject> {
  const source = await readFile(SPEC_FILE, 'utf8');
  const key = createHash('sha256').update(`${redocly.version}\n${source}`).digest('hex');
  const cached = new URL(`${key}.json`, CACHE_DIR);
  const hit = await readFile(cached, 'utf8').catch(() => null);
  if (hit !== null) return JSON.parse(hit) as JsonObject;
  const spec = await dereference(source);
  // Written aside and renamed, so a test file running alongside never reads half a file.
  const partial = new URL(`${key}.${process.pid}.tmp`, CACHE_DIR);
  await mkdir(CACHE_DIR, { recursive: true });
  await writeFile(partial, JSON.stringify(spec));
  await rename(partial, cached);
  return spec;
}

let shared: Promise<SpecValidator> | undefined;

/** One validator over the project's openapi.yaml, compiled lazily and shared by every app a test file builds. */
export function specValidator(): Promise<SpecValidator> {
  shared ??= dereferencedSpec().then((spec) => new SpecValidator(spec));
  return shared;
}

function decodedUrl(url: string): string {
  try {
    return decodeURI(url);
  } catch {
    return url;
  }
}

/** Paths of the WebDAV face, which openapi.yaml describes in prose (docs/carddav.md) rather than as operations. */
function isWebDav(url: string): boolean {
  const path = decodedUrl(url).split('?', 1)[0]!;
  return path === '/dav' || path.startsWith('/dav/') || path === '/.well-known/carddav';
}

/**
 * What docs/carddav.md fixes for every WebDAV answer: an error (4xx, 5xx) is an XML `D:error` body
 * with an `X:detail`, never `{detail}`; a 207 is an XML `D:multistatus`.
 */
function checkWebDav(response: ObservedResponse): string[] {
  const where = `${response.method} ${response.url} → ${response.statusCode}`;
  const type = String(response.headers['content-type'] ?? '');
  const body = response.payload === null ? '' : response.payload.toString();
  const xml = type === 'application/xml; charset=utf-8' && body.startsWith('<?xml version="1.0" encoding="UTF-8"?>');
  if (response.statusCode >= 400 && !(xml && /^<\?xml[^>]*\?><D:error [^>]*>.*<X:detail>[^<]*<\/X:detail><\/D:error>$/s.test(body))) {
    return [`${where}: a WebDAV error must be an XML D:error with an X:detail, not ${type} ${body.slice(0, 200)}`];
  }
  if (response.statusCode === 207 && !(xml && body.includes('<D:multistatus '))) return [`${where}: a 207 must be an XML D:multistatus`];
  return [];
}

/**
 * Adds an onSend hook that checks every response of a spec operation and reports each departure.
 * Docs routes and unknown-route 404s carry no operationId and are not checked; neither are HEAD and OPTIONS.
 * The WebDAV face (`/dav`, `/.well-known/carddav`) is checked against what docs/carddav.md fixes instead.
 */
export async function checkResponsesAgainstSpec(app: FastifyInstance, report: (problem: string) => void): Promise<void> {
  const validator = await specValidator();
  app.addHook('onSend', async (request, reply, payload) => {
    if (isWebDav(request.url)) {
      const body = typeof payload === 'string' || Buffer.isBuffer(payload) ? payload : null;
      // A multistatus written batch by batch: its text is the test's to read; its type is checked here.
      if (payload instanceof Readable) {
        if (reply.statusCode !== 207 || reply.getHeader('content-type') !== 'application/xml; charset=utf-8')
          report(`${request.method} ${request.url} → ${reply.statusCode}: a streamed answer must be an XML 207`);
        return payload;
      }
      const response = {
        method: request.method,
        url: request.url,
        statusCode: reply.statusCode,
        headers: reply.getHeaders(),
        payload: body,
      };
      if (request.method !== 'HEAD') for (const problem of checkWebDav(response)) report(problem);
      return payload;
    }
    const routed = request.routeOptions.config.operationId;
    if (routed === undefined || request.method === 'HEAD' || request.method === 'OPTIONS') return payload;
    // The router decodes the path; so does the match (`/%61pi/...` is `/api/...`).
    const op = validator.find(request.method, decodedUrl(request.url));
    const where = `${request.method} ${request.url} → ${reply.statusCode}`;
    if (!op) report(`${where}: routed to ${routed}, which no operation of openapi.yaml matches`);
    else if (op.operationId !== routed) report(`${where}: routed to ${routed}, but openapi.yaml matches ${op.operationId}`);
    else {
      const body = typeof payload === 'string' || Buffer.isBuffer(payload) ? payload : null;
      const response = {
        method: request.method,
        url: request.url,
        statusCode: reply.statusCode,
        headers: reply.getHeaders(),
        payload: body,
      };
      for (const problem of validator.check(op, response)) report(problem);
    }
    return payload;
  });
}
