/**
 * Real CardDAV clients for test/carddav/real-clients.test.ts and npm run bench:carddav: Debian's
 * vdirsyncer (two-way sync between a folder of .vcf files and a CardDAV book) and khard (reads the
 * folder). `.ci/run` installs them.
 */
import { execFile } from 'node:child_process';
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';

export interface CommandResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a command to its end (input piped in when given); never throws for a non-zero exit. */
export function run(
  command: string,
  args: string[],
  options: { env?: Record<string, string>; input?: string; timeoutMs?: number } = {},
): Promise<CommandResult> {
  return new Promise((resolve) => {
    const child = execFile(
      command,
      args,
      { env: { ...process.env, ...options.env }, maxBuffer: 256 * 1024 * 1024, timeout: options.timeoutMs ?? 600_000 },
      (error, stdout, stderr) => resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, stdout, stderr }),
    );
    // A command that never reads its input may exit before the write: that is no failure.
    child.stdin?.on('error', () => undefined);
    child.stdin?.end(options.input ?? '');
  });
}

export interface VdirsyncerSetup {
  /** The folder of .vcf files (vdirsyncer's side a; khard reads it). */
  localDir: string;
  configPath: string;
  khardConfigPath: string;
}

/**
 * A vdirsyncer pair between `dir/local/<collection>` and the CardDAV server at `url`, found by
 * discovery from the server's root, with `conflict` deciding conflicts; and a khard config over the
 * folder. `vdirsyncer discover` must run once before the first sync.
 */
export async function vdirsyncerSetup(
  dir: string,
  server: { url: string; username: string; password: string },
  conflict: 'a wins' | 'b wins',
): Promise<VdirsyncerSetup> {
  const localRoot = path.join(dir, 'local');
  await mkdir(localRoot, { recursive: true });
  const configPath = path.join(dir, 'vdirsyncer.conf');
  const quote = (value: string) => JSON.stringify(value);
  await writeFile(
    configPath,
    [
      '[general]',
      `status_path = ${quote(path.join(dir, 'status'))}`,
      '',
      '[pair contacts]',
      'a = "local"',
      'b = "server"',
      'collections = ["from b"]',
      `conflict_resolution = ${quote(conflict)}`,
      '',
      '[storage local]',
      'type = "filesystem"',
      `path = ${quote(localRoot)}`,
      'fileext = ".vcf"',
      '',
      '[storage server]',
      'type = "carddav"',
      `url = ${quote(server.url)}`,
      `username = ${quote(server.username)}`,
      `password = ${quote(server.password)}`,
      '',
    ].join('\n'),
  );
  const khardConfigPath = path.join(dir, 'khard.conf');
  const localDir = path.join(localRoot, 'contacts');
  await writeFile(
    khardConfigPath,
    [
      '[addressbooks]',
      '[[contacts]]',
      `path = ${localDir}`,
      '',
      '[general]',
      'default_action = list',
      'editor = true',
      'merge_editor = true',
      '',
    ].join('\n'),
  );
  return { localDir, configPath, khardConfigPath };
}

/** Runs vdirsyncer with the setup's config (stopped after `timeoutMs`); `-v debug` output lands in stderr. */
export function vdirsyncer(
  setup: VdirsyncerSetup,
  args: string[],
  verbosity: 'info' | 'debug' = 'info',
  timeoutMs = 600_000,
): Promise<CommandResult> {
  return run('vdirsyncer', ['-c', setup.configPath, '-v', verbosity, ...args], {
    input: 'y\ny\ny\n',
    env: { LC_ALL: 'C.UTF-8', LANG: 'C.UTF-8' },
    timeoutMs,
  });
}

/** The .vcf files of the local folder, by file name. */
export async function localCards(setup: VdirsyncerSetup): Promise<Map<string, string>> {
  const names = (await readdir(setup.localDir)).filter((name) => name.endsWith('.vcf'));
  return new Map(
    await Promise.all(
      names.map(async (name): Promise<[string, string]> => [name, await readFile(path.join(setup.localDir, name), 'utf8')]),
    ),
  );
}

/** How many requests of each method a debug-level vdirsyncer run made. */
export function requestCounts(debugLog: string): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const match of debugLog.matchAll(/^debug: (GET|PUT|DELETE|PROPFIND|REPORT) /gm)) counts[match[1]!] = (counts[match[1]!] ?? 0) + 1;
  return counts;
}
