/**
 * What every family of hostile requests shares: the case and family types, seeded choice, JSON text
 * JSON.stringify cannot write, the JSON operations with a valid body each, and text for URLs.
 */
import fc from 'fast-check';
import { craftToken, credentials } from '../auth/accounts.js';
import { contactBody } from '../contacts/fixtures.js';
import { seededRandom } from '../helper.js';

export interface HostileCase {
  /** What is odd about the request, for failure reports. */
  label: string;
  method: string;
  url: string;
  headers?: Record<string, string>;
  payload?: string | Buffer;
  /** Bytes written to a socket as they are; `method` and `url` then only describe them. */
  raw?: Buffer;
  /** Statuses the contract fixes for this request; absent, any status below 500 will do. */
  expect?: readonly number[];
}

/** What the generated requests act on: a real logged-in user, their contact, and another user's. */
export interface Subjects {
  userId: number;
  username: string;
  email: string;
  password: string;
  accessToken: string;
  refreshToken: string;
  contactId: number;
  /** A contact of the user that the DELETE cases may remove. */
  spareContactId: number;
  otherUserId: number;
  otherContactId: number;
}

export interface Family {
  name: string;
  /** What the family varies, for the test's messages. */
  about: string;
  cases: (subjects: Subjects, seed: number) => HostileCase[];
}

// ---------------------------------------------------------------------------------------------
// Seeded choice

export interface Rng {
  int(min: number, max: number): number;
  pick<T>(items: readonly T[]): T;
  sample<T>(items: readonly T[], count: number): T[];
}

export function rng(seed: number): Rng {
  const next = seededRandom(seed);
  const int = (min: number, max: number) => min + Math.floor(next() * (max - min + 1));
  return {
    int,
    pick: (items) => items[int(0, items.length - 1)]!,
    sample(items, count) {
      const pool = [...items];
      for (let i = pool.length - 1; i > 0; i--) {
        const j = int(0, i);
        [pool[i], pool[j]] = [pool[j]!, pool[i]!];
      }
      return pool.slice(0, count);
    },
  };
}

/** fast-check values for a seed: the same list every run. */
export function samples<T>(arbitrary: fc.Arbitrary<T>, seed: number, count: number): T[] {
  return fc.sample(arbitrary, { seed, numRuns: count });
}

/** Any UTF-16 code unit, lone surrogates and NUL included. */
const codeUnit = fc.integer({ min: 0, max: 0xffff }).map((n) => String.fromCharCode(n));
export const hostileString = (maxLength: number) =>
  fc.string({
    unit: fc.oneof(
      { weight: 6, arbitrary: codeUnit },
      { weight: 1, arbitrary: fc.constantFrom('\u0000', '\ud800', '\udc00', '%', '\\', '"', ',', ':', '[', ']') },
    ),
    maxLength,
  });

// ---------------------------------------------------------------------------------------------
// JSON text with parts JSON.stringify cannot write (1e400, -0, duplicate keys)

/** A JSON fragment written as is. */
class Raw {
  constructor(readonly text: string) {}
}
export const raw = (text: string) => new Raw(text);

/** JSON text; `Raw` values are copied verbatim. JSON.stringify already escapes NUL and lone surrogates as \u0000 / \ud800. */
export function toJson(value: unknown): string {
  if (value instanceof Raw) return value.text;
  if (Array.isArray(value)) return `[${value.map(toJson).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    return `{${Object.entries(value)
      .map(([key, item]) => `${JSON.stringify(key)}:${toJson(item)}`)
      .join(',')}}`;
  }
  return JSON.stringify(value);
}

/** Short, printable description of a value for labels. */
export function describe(value: unknown): string {
  const text = value instanceof Raw ? value.text : (JSON.stringify(value) ?? String(value));
  return text.length > 40 ? `${text.slice(0, 30)}…(${text.length} chars)` : text;
}

export const JSON_HEADERS = { 'content-type': 'application/json' };
/** An operation that takes a JSON body, with a body it accepts and the fields worth varying. */
interface JsonOperation {
  name: string;
  method: string;
  url: string;
  secured: boolean;
  body: () => Record<string, unknown>;
  fields: readonly string[];
}

export function jsonOperations(s: Subjects): JsonOperation[] {
  const resetToken = () => craftToken({ sub: String(s.otherUserId), typ: 'reset' });
  const contactFields = ['first_name', 'last_name', 'email', 'phone', 'birthday', 'additional_data', 'id', 'created_at', 'updated_at'];
  return [
    {
      name: 'register',
      method: 'POST',
      url: '/api/auth/register',
      secured: false,
      body: () => ({ ...credentials() }),
      fields: ['username', 'email', 'password'],
    },
    {
      name: 'request-verification',
      method: 'POST',
      url: '/api/auth/request-verification',
      secured: false,
      body: () => ({ email: s.email }),
      fields: ['email'],
    },
    {
      name: 'refresh',
      method: 'POST',
      url: '/api/auth/refresh',
      secured: false,
      body: () => ({ refresh_token: s.refreshToken }),
      fields: ['refresh_token'],
    },
    {
      name: 'forgot-password',
      method: 'POST',
      url: '/api/auth/forgot-password',
      secured: false,
      body: () => ({ email: 'nobody@example.com' }),
      fields: ['email'],
    },
    {
      name: 'reset-password',
      method: 'POST',
      url: '/api/auth/reset-password',
      secured: false,
      body: () => ({ token: resetToken(), password: 'new-password-123' }),
      fields: ['token', 'password'],
    },
    { name: 'logout', method: 'POST', url: '/api/auth/logout', secured: true, body: () => ({}), fields: [] },
    { name: 'create contact', method: 'POST', url: '/api/contacts/', secured: true, body: () => contactBody(), fields: contactFields },
    {
      name: 'replace contact',
      method: 'PUT',
      url: `/api/contacts/${s.contactId}`,
      secured: true,
      body: () => contactBody(),
      fields: contactFields,
    },
    {
      name: 'patch contact',
      method: 'PATCH',
      url: `/api/contacts/${s.contactId}`,
      secured: true,
      body: () => ({ first_name: 'Pat' }),
      fields: contactFields,
    },
  ];
}

export function jsonCase(
  s: Subjects,
  op: JsonOperation,
  label: string,
  payload: string | Buffer,
  headers: Record<string, string> = JSON_HEADERS,
): HostileCase {
  return {
    label: `${op.name}: ${label}`,
    method: op.method,
    url: op.url,
    headers: { ...headers, ...(op.secured ? bearerHeader(s.accessToken) : {}) },
    payload,
  };
}

export const bearerHeader = (token: string) => ({ authorization: `Bearer ${token}` });

// ---------------------------------------------------------------------------------------------
// Text in URLs (paths and query strings)

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/** Percent-encodes text for a URL; a lone surrogate, which UTF-8 cannot carry, goes as its JSON escape (`\ud800`). */
export function encodeText(text: string): string {
  return encodeURIComponent(text.replace(LONE_SURROGATE, (ch) => `\\u${ch.charCodeAt(0).toString(16)}`));
}

export function decodeSafely(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}
