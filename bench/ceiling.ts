/**
 * The comparator of `npm run bench`: bare Fastify with the service's own `fastify` and `@fastify/jwt`,
 * one route per measured operation, each checking the bearer token and answering the status, headers
 * and body bytes the service answered. It shows how fast the framework alone serves the same exchange.
 *
 * Writes are the insert ceiling: with DATABASE_URL set, the create is one parameterised INSERT and an
 * import one INSERT of every row, into CEILING_TABLE, a copy of contacts' columns with only its
 * primary key and the (owner_id, lower(email)) unique index: what any write of a contact must pay.
 *
 * Started by bench/bench.ts as `node bench/ceiling.ts <canned.json>` (Node strips the types; nothing
 * here needs a build) with JWT_SECRET, PORT and DATABASE_URL set.
 */
import { readFile } from 'node:fs/promises';
import fastifyJwt from '@fastify/jwt';
import Fastify, { type FastifyInstance } from 'fastify';
import pg from 'pg';

const CEILING_TABLE = 'bench_ceiling_contacts';
/** The columns a create and the bench's CSV imports set, in the CSV's order. */
const WRITTEN = ['first_name', 'last_name', 'email', 'phone', 'birthday'] as const;
const WRITTEN_TYPES = ['text', 'text', 'text', 'text', 'date'] as const;

/** One answer captured from the service. */
export interface CannedResponse {
  method: 'GET' | 'POST';
  /** The service's route pattern, e.g. `/api/contacts/:contact_id`. */
  route: string;
  /** The request URL (path and query) this answer belongs to. */
  url: string;
  status: number;
  headers: Record<string, string>;
  body: string;
}

async function main(): Promise<void> {
  const [cannedFile] = process.argv.slice(2);
  const secret = process.env.JWT_SECRET;
  if (!cannedFile || !secret) throw new Error('usage: JWT_SECRET=… PORT=… node bench/ceiling.ts <canned.json>');
  const canned = JSON.parse(await readFile(cannedFile, 'utf8')) as CannedResponse[];

  // The service's router settings, so `/api/contacts/` routes the same way.
  const app = Fastify({ logger: false, routerOptions: { ignoreTrailingSlash: true } });
  await app.register(fastifyJwt, { secret, sign: { algorithm: 'HS256' }, verify: { algorithms: ['HS256'] } });

  // The list and the filtered list share one route, as in the service; the URL picks the answer.
  const routes = new Map<string, Map<string, CannedResponse>>();
  for (const answer of canned) {
    const key = `${answer.method} ${answer.route}`;
    if (!routes.has(key)) routes.set(key, new Map());
    routes.get(key)!.set(answer.url, answer);
  }

  const databaseUrl = process.env.DATABASE_URL;
  if (databaseUrl) await insertRoutes(app, new pg.Pool({ connectionString: databaseUrl, max: 10 }), routes.get('POST /api/contacts/'));
  for (const [key, byUrl] of routes) {
    const [method, url] = key.split(' ') as ['GET' | 'POST', string];
    if (databaseUrl && method === 'POST') continue;
    app.route({
      method,
      url,
      onRequest: async (request, reply) => {
        try {
          await request.jwtVerify();
        } catch {
          return reply.code(401).header('www-authenticate', 'Bearer').send({ detail: 'Not authenticated' });
        }
      },
      handler: async (request, reply) => {
        const answer = byUrl.get(request.url);
        if (!answer) return reply.code(404).send({ detail: 'Not captured' });
        // A string with a JSON content type goes out as is, like the service's serialized body.
        return reply.code(answer.status).headers(answer.headers).send(answer.body);
      },
    });
  }

  await app.listen({ host: '127.0.0.1', port: Number(process.env.PORT ?? 0) });
  for (const signal of ['SIGTERM', 'SIGINT'] as const) process.once(signal, () => void app.close().then(() => process.exit(0)));
}

/** The insert ceiling's create and import (see the file's comment), on a table it makes afresh. */
async function insertRoutes(app: FastifyInstance, pool: pg.Pool, create: Map<string, CannedResponse> | undefined): Promise<void> {
  await pool.query(`drop table if exists ${CEILING_TABLE}`);
  await pool.query(`create table ${CEILING_TABLE} (like contacts including defaults including generated including identity)`);
  await pool.query(`alter table ${CEILING_TABLE} add primary key (id)`);
  // contacts' trigger numbers each change in its owner's book (migration 033); the copy has no trigger.
  await pool.query(`alter table ${CEILING_TABLE} alter column change_position set default 0`);
  await pool.query(`create unique index on ${CEILING_TABLE} (owner_id, lower(email))`);
  const headers = create ? [...create.values()][0]!.headers : {};
  const columns = WRITTEN.join(', ');
  const insertOne = `insert into ${CEILING_TABLE} (owner_id, ${columns}) values ($1, ${WRITTEN.map((_, i) => `$${i + 2}`).join(', ')}) returning id, ${columns}`;
  const insertAll = `insert into ${CEILING_TABLE} (owner_id, ${columns}) select $1, * from unnest(${WRITTEN.map((_, i) => `$${i + 2}::${WRITTEN_TYPES[i]}[]`).join(', ')}) on conflict do nothing`;
  const owner = (request: { user: unknown }) => Number((request.user as { sub: string }).sub);
  const authenticate = async (
    request: { jwtVerify(): Promise<unknown> },
    reply: { code(status: number): { send(body: unknown): unknown } },
  ) => {
    try {
      await request.jwtVerify();
    } catch {
      return reply.code(401).send({ detail: 'Not authenticated' });
    }
    return undefined;
  };
  app.post('/api/contacts/', { onRequest: authenticate }, async (request, reply) => {
    const body = request.body as Record<(typeof WRITTEN)[number], string>;
    const { rows } = await pool.query(insertOne, [owner(request), ...WRITTEN.map((column) => body[column])]);
    return reply.code(201).headers(headers).send(rows[0]);
  });
  // The bench's own CSV (the header, then plain cells without quotes): the ceiling reads it with a split.
  app.addContentTypeParser('text/csv', { parseAs: 'string', bodyLimit: 10 * 1024 * 1024 }, (_request, body, done) => done(null, body));
  app.post('/api/contacts/import', { onRequest: authenticate }, async (request) => {
    const lines = (request.body as string)
      .split('\r\n')
      .slice(1)
      .filter((line) => line !== '');
    const cells = lines.map((line) => line.split(','));
    const { rowCount } = await pool.query(insertAll, [owner(request), ...WRITTEN.map((_, i) => cells.map((row) => row[i] || null))]);
    return { created: rowCount, errors: [] };
  });
}

await main();
