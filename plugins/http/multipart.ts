import type { FastifyRequest } from 'fastify';
import { BadRequest, ValidationFailed } from './errors.js';

/**
 * preValidation hook of operations that take `multipart/form-data`: the form's fields become the
 * body (a field sent twice becomes a list, which the schema refuses). The parser's own limits keep
 * their errors (see error-handler.ts); anything else it chokes on, such as a body cut short, is a 400.
 */
export async function readMultipartFields(request: FastifyRequest): Promise<void> {
  if (!request.isMultipart()) return;
  const body: Record<string, unknown> = {};
  try {
    for await (const part of request.parts()) {
      if (part.type === 'file') throw new ValidationFailed('body must not contain files');
      const earlier = body[part.fieldname];
      body[part.fieldname] = earlier === undefined ? part.value : [earlier, part.value].flat();
    }
  } catch (error) {
    if (error instanceof ValidationFailed || String((error as { code?: unknown }).code).startsWith('FST_')) throw error;
    throw new BadRequest('Malformed multipart body');
  }
  request.body = body;
}
