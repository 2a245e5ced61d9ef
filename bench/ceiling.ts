/**
 * The comparator of `npm run bench`: bare Fastify with the service's own `fastify` and `@fastify/jwt`,
 * one route per measured operation, each checking the bearer token and answering the status, headers
 * and body bytes the service answered. It shows how fast the framework alone serves the same exchange.
 *
 * Started by bench/bench.ts as `node bench/ceiling.ts <canned.json>` (Node strips the types; nothing
 * here needs a build) with JWT_SECRET and PORT set.
 */
import { readFile } from 'node:fs/promises';
import fastifyJwt from '@fastify/jwt';
import Fastify from 'fastify';

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

  for (const [key, byUrl] of routes) {
    const [method, url] = key.split(' ') as ['GET' | 'POST', string];
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

await main();
