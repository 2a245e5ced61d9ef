import { spawnSync } from 'node:child_process';
import { cp, mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import t from 'tap';

t.test('config:check fails when .env.example or the docs table drifts from the schema, and config:docs mends both', async (t) => {
  const root = await mkdtemp(path.join(tmpdir(), 'contacts-config-docs-'));
  t.teardown(() => rm(root, { recursive: true, force: true }));
  await writeFile(path.join(root, 'package.json'), '{ "type": "module" }');
  for (const file of ['scripts/config-docs.ts', 'plugins/config-schema.ts', '.env.example', 'docs/configuration.md']) {
    await mkdir(path.dirname(path.join(root, file)), { recursive: true });
    await cp(file, path.join(root, file));
  }
  const run = (...args: string[]) =>
    spawnSync(process.execPath, ['--import', import.meta.resolve('tsx'), path.join(root, 'scripts/config-docs.ts'), ...args], {
      encoding: 'utf8',
      timeout: 60_000,
    });
  const schema = path.join(root, 'plugins/config-schema.ts');
  await writeFile(schema, (await readFile(schema, 'utf8')).replace('maximum: 65_535, default: 3000', 'maximum: 65_535, default: 8080'));
  const drifted = run('--check');
  t.equal(drifted.status, 1);
  t.equal(
    drifted.stderr,
    '.env.example and docs/configuration.md differ from plugins/config-schema.ts: run `npm run config:docs` and commit the result\n',
  );

  t.equal(run().status, 0);
  t.match(await readFile(path.join(root, '.env.example'), 'utf8'), /\nPORT=8080\n/);
  t.match(
    await readFile(path.join(root, 'docs/configuration.md'), 'utf8'),
    /\| `PORT` \| `8080` \| a whole number from 0 to 65535 \| Port to listen on\. \|/,
  );
  t.equal(run('--check').status, 0, 'mended');

  const doc = path.join(root, 'docs/configuration.md');
  await writeFile(doc, (await readFile(doc, 'utf8')).replace(/<!-- END variables -->/, ''));
  const unmarked = run('--check');
  t.equal(unmarked.status, 1);
  t.match(unmarked.stderr, 'docs/configuration.md lacks the marker lines between which the table goes');
});
