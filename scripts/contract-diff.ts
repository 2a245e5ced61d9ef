/**
 * `npm run contract:diff -- <git-ref>`: compares the working tree's openapi.yaml with its version at
 * <git-ref> and prints a changelog (api-smart-diff, configured in scripts/contract-diff/compare.ts).
 *
 * Exit 0: no breaking change, or breaking changes with a major bump of info.version, or no
 * openapi.yaml at <git-ref> (nothing to compare with). Exit 1: breaking changes without a major
 * bump. Exit 2: usage errors (no ref, unknown ref, unreadable or invalid contract) and any other failure.
 */
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { compareContracts, formatReport, verdict } from './contract-diff/compare.js';
import { dereference } from './dereference.js';

const SPEC = 'openapi.yaml';
const USAGE = `usage: npm run contract:diff -- <git-ref>   (compares ${SPEC} with its version at <git-ref>)`;

/** A failure the caller caused: printed without a stack, exit 2. */
class UsageError extends Error {}

interface Git {
  ok: boolean;
  stdout: string;
}

/** Runs git in `cwd`; a non-zero exit is a result, not an exception. */
function git(args: string[], cwd: string): Promise<Git> {
  return new Promise((resolve) => {
    execFile('git', args, { cwd, maxBuffer: 64 * 1024 * 1024 }, (error, stdout) => resolve({ ok: !error, stdout }));
  });
}

async function readContract(source: string, name: string): ReturnType<typeof dereference> {
  try {
    return await dereference(source);
  } catch (error) {
    throw new UsageError(`${name} is not a valid contract: ${(error as Error).message}`);
  }
}

async function main(args: string[]): Promise<number> {
  if (args.length === 1 && (args[0] === '--help' || args[0] === '-h')) {
    console.log(USAGE);
    return 0;
  }
  const [ref] = args;
  if (args.length !== 1 || !ref || ref.startsWith('-')) throw new UsageError(USAGE);

  const top = await git(['rev-parse', '--show-toplevel'], process.cwd());
  if (!top.ok) throw new UsageError('not inside a git repository');
  const root = top.stdout.trim();
  if (!(await git(['rev-parse', '--verify', '--quiet', `${ref}^{commit}`], root)).ok) throw new UsageError(`unknown git ref '${ref}'`);

  const current = await readFile(path.join(root, SPEC), 'utf8').catch(() => {
    throw new UsageError(`${SPEC} not found in ${root}`);
  });
  const previous = await git(['show', `${ref}:${SPEC}`], root);
  if (!previous.ok) {
    console.log(`${SPEC} does not exist at ${ref}: no previous contract to compare with, nothing can break.`);
    return 0;
  }

  const before = await readContract(previous.stdout, `${SPEC} at ${ref}`);
  const after = await readContract(current, SPEC);
  const changes = compareContracts(before, after);
  const versionBefore = (before.info as { version?: unknown } | undefined)?.version;
  const versionAfter = (after.info as { version?: unknown } | undefined)?.version;
  const result = verdict(changes, versionBefore, versionAfter);
  const header = `${SPEC} at ${ref} (info.version ${String(versionBefore)}) → working tree (info.version ${String(versionAfter)})`;
  process.stdout.write(formatReport(changes, result, header));
  return result.exitCode;
}

try {
  process.exitCode = await main(process.argv.slice(2));
} catch (error) {
  // Anything unexpected is no verdict either: 2, never the 1 that means "breaking".
  console.error(error instanceof UsageError ? `contract:diff: ${error.message}` : error);
  process.exitCode = 2;
}
