/** Helpers shared by the contacts tests: users with tokens, contact bodies, and calls. */
import { randomBytes } from 'node:crypto';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { sql } from 'kysely';
import { build, type BuildTestOptions, type Teardown } from '../helper.js';

export interface TestUser {
  id: number;
  token: string;
}

/** The app, with a high anonymous limit so these tests never meet the rate limits (testEnv lifts the rest). */
export function buildContactsApp(t: Teardown, options: BuildTestOptions = {}): Promise<FastifyInstance> {
  return build(t, { ...options, env: { RATE_LIMIT_ANON_PER_MIN: '100000', ...options.env } });
}

/** A verified user written straight to the database, and an access token for it. */
export async function createUser(app: FastifyInstance): Promise<TestUser> {
  const name = `u_${randomBytes(6).toString('hex')}`;
  const { id } = await app.db
    .insertInto('users')
    .values({ username: name, email: `${name}@example.com`, password_hash: 'not-a-hash', is_verified: true })
    .returning('id')
    .executeTakeFirstOrThrow();
  return { id, token: app.tokens.sign(id, 'access', 900) };
}

let counter = 0;

/** A valid create body; `overrides` replace fields. */
export function contactBody(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  const n = ++counter;
  return {
    first_name: 'Jane',
    last_name: 'Doe',
    email: `jane.${n}.${randomBytes(3).toString('hex')}@example.com`,
    phone: '+14155550123',
    birthday: '1990-05-17',
    ...overrides,
  };
}

export interface Caller {
  (method: string, url: string, payload?: unknown, headers?: Record<string, string>): Promise<LightMyRequestResponse>;
}

/** Calls the app as `user`. */
export function as(app: FastifyInstance, user: TestUser): Caller {
  return (method, url, payload, headers = {}) =>
    app.inject({
      method: method as 'GET',
      url,
      headers: { authorization: `Bearer ${user.token}`, ...headers },
      ...(payload === undefined ? {} : { payload: payload as object }),
    });
}

/** Creates contacts in order and returns them as the API answered. */
export async function createContacts(call: Caller, bodies: Record<string, unknown>[]): Promise<Record<string, any>[]> {
  const created = [];
  for (const body of bodies) {
    const res = await call('POST', '/api/contacts/', body);
    if (res.statusCode !== 201) throw new Error(`create failed: ${res.statusCode} ${res.body}`);
    created.push(res.json());
  }
  return created;
}

/** How many tombstones (incremental sync's record of deletions) contact `id` has left. */
export async function tombstoneCount(app: FastifyInstance, id: number): Promise<number> {
  const { rows } = await sql<{ n: number }>`select count(*)::int as n from contact_tombstones where contact_id = ${id}`.execute(app.db);
  return rows[0]!.n;
}
