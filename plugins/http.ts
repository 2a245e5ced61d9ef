import type { FastifyServerOptions } from 'fastify';
import fp from 'fastify-plugin';
import { errorHandler, frameworkErrors, notFoundHandler } from './http/error-handler.js';
import { parseJsonBody } from './http/json-body.js';
import { compileValidator, formatSchemaError } from './http/validation.js';

const MiB = 1024 * 1024;

/** The server options the HTTP conventions need; they can only be given when Fastify is created. */
export const httpServerOptions = {
  bodyLimit: MiB,
  routerOptions: { ignoreTrailingSlash: true },
  schemaErrorFormatter: formatSchemaError,
  frameworkErrors,
  return503OnClosing: true,
} satisfies FastifyServerOptions;

/**
 * The HTTP conventions of the contract: strict schema validation (422), the JSON body parser
 * (400 for malformed JSON) and one error handler that turns every error into `{detail}`.
 */
export default fp(
  async (app) => {
    app.setValidatorCompiler(compileValidator);
    app.setErrorHandler(errorHandler);
    app.setNotFoundHandler(notFoundHandler);
    app.removeContentTypeParser('application/json');
    app.addContentTypeParser('application/json', { parseAs: 'string' }, parseJsonBody);
  },
  { name: 'http', fastify: '5.x' },
);
