/**
 * Seeded generators of hostile requests, one module per part of a request, for test/hostile-input/hostile-input.test.ts. Each family returns the
 * same cases for the same seed and subjects, so a failure report can be reproduced request by request.
 */
import { jsonBodies } from './body.js';
import { contentTypes } from './content-type.js';
import { forms } from './form.js';
import { headers } from './headers.js';
import { methods } from './methods.js';
import { paths } from './path.js';
import { queryStrings } from './query.js';
import { rawHttp } from './raw-http.js';
import { unstorableText } from './text.js';
import type { Family } from './common.js';

export type { HostileCase, Subjects } from './common.js';

export const FAMILIES: readonly Family[] = [
  jsonBodies,
  contentTypes,
  forms,
  queryStrings,
  paths,
  headers,
  methods,
  rawHttp,
  unstorableText,
];
