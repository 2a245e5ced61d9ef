/**
 * Builds the package into sdk/dist (`prepack` runs it): refuses a stale package (types or version
 * behind openapi.yaml), then compiles src/ with src/openapi.ts replaced by a copy of the service's
 * generated types, so the tarball needs nothing from this repo.
 */
import { execFileSync } from 'node:child_process';
import { copyFile, cp, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const sdk = new URL('./', import.meta.url);
const stage = new URL('.build/', sdk);
const node = (args: string[]) => execFileSync(process.execPath, args, { cwd: fileURLToPath(new URL('..', sdk)), stdio: 'inherit' });

node(['--import', 'tsx', 'scripts/codegen.ts', '--check']);
await rm(stage, { recursive: true, force: true });
await rm(new URL('dist/', sdk), { recursive: true, force: true });
await cp(new URL('src/', sdk), stage, { recursive: true });
await copyFile(new URL('../src/generated/openapi.ts', sdk), new URL('openapi.ts', stage));
try {
  node([createRequire(import.meta.url).resolve('typescript/bin/tsc'), '-p', fileURLToPath(new URL('tsconfig.json', sdk))]);
} finally {
  await rm(stage, { recursive: true, force: true });
}
