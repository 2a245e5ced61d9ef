import type { FastifyRequest } from 'fastify';
import { parse } from 'secure-json-parse';
import { BadRequest, ValidationFailed } from './errors.js';

/**
 * The JSON body parser. Fastify's own reports every failure as invalid JSON; here valid JSON that
 * carries a prototype-poisoning key is told apart, as the field problem (422) it is.
 */
export function parseJsonBody(_request: FastifyRequest, body: string, done: (error: Error | null, value?: unknown) => void): void {
  try {
    if (body === '') throw new SyntaxError('empty body');
    done(null, parse(body, { protoAction: 'error', constructorAction: 'error' }));
  } catch (error) {
    const poisoned = error instanceof SyntaxError && error.message.startsWith('Object contains forbidden');
    done(
      poisoned
        ? new ValidationFailed('body must not contain "__proto__" or "constructor.prototype" keys')
        : new BadRequest('Malformed JSON body'),
    );
  }
}
