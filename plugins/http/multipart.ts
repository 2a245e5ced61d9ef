import type { FastifyRequest } from 'fastify';
import { hasFrameworkAnswer } from './error-handler.js';
import { BadRequest, ValidationFailed } from './errors.js';

/** What an operation's multipart body may carry besides text fields. */
export interface MultipartFiles {
  /** Fields that arrive as file parts (binary in the schema); empty, any file part is refused. */
  fileFields: readonly string[];
  /** The largest file part, in bytes; absent, the app's body limit (@fastify/multipart's default). */
  maxFileSize?: number;
}

/** The longest text field of a form; @fastify/multipart cuts longer ones, which are refused here. */
export const MULTIPART_FIELD_BYTES = 4096;

/**
 * The preValidation hook of operations that take `multipart/form-data`: the form's parts become the
 * body, text fields as strings and file parts as Buffers, for the schema to judge (a field sent
 * twice becomes a list, which the schema refuses). An operation without file fields takes no file
 * part at all; one with them takes as many file parts as it has file fields, each up to
 * `maxFileSize` (413 beyond). The parser's own limits keep their errors (see error-handler.ts);
 * anything else it chokes on, such as a body cut short or a part declared JSON that is not, is a 400.
 */
export function multipartReader({ fileFields, maxFileSize }: MultipartFiles) {
  const options =
    fileFields.length > 0 ? { limits: { files: fileFields.length, ...(maxFileSize !== undefined && { fileSize: maxFileSize }) } } : {};
  return async function readMultipartFields(request: FastifyRequest): Promise<void> {
    if (!request.isMultipart()) return;
    const body: Record<string, unknown> = {};
    try {
      for await (const part of request.parts(options)) {
        if (part.type === 'field' && part.valueTruncated) {
          throw new ValidationFailed(`body/${part.fieldname} must be at most ${MULTIPART_FIELD_BYTES} bytes`);
        }
        const value = part.type === 'file' ? await part.toBuffer() : part.value;
        const earlier = body[part.fieldname];
        body[part.fieldname] = earlier === undefined ? value : [earlier, value].flat();
      }
    } catch (error) {
      if (error instanceof ValidationFailed) throw error;
      const code = String((error as { code?: unknown }).code);
      if (code === 'FST_FILES_LIMIT' && fileFields.length > 0) {
        throw new ValidationFailed(`body must contain at most ${fileFields.length} file${fileFields.length === 1 ? '' : 's'}`);
      }
      // The parser's limits keep their answers (error-handler.ts); anything else it chokes on (a
      // body cut short, a part declared JSON that is not) is a body that cannot be parsed.
      if (hasFrameworkAnswer(code)) throw error;
      throw new BadRequest('Malformed multipart body');
    }
    request.body = body;
  };
}
