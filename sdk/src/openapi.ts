/**
 * In the repo the SDK is typed by the service's own generated file (`npm run codegen`), so there
 * is one openapi-typescript output. `sdk/build.ts` puts a copy of that file in place of this one,
 * so the package carries its own.
 */
export type * from '../../src/generated/openapi.js';
