/**
 * `npm run contract:diff`: how this project configures api-smart-diff (scripts/contract-diff/compare.ts),
 * on a small contract that goes through YAML and the real dereferencing; the verdict; and the CLI
 * on a temporary git repo. The library's other rules are its own to test.
 */
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { stringify } from 'yaml';
import { compareContracts, formatChange, formatReport, verdict } from '../../scripts/contract-diff/compare.js';
import { dereference } from '../../scripts/dereference.js';

const root = fileURLToPath(new URL('../..', import.meta.url));

/** A small contract: a shared request schema, a shared response schema, a header enum and security. */
function baseSpec(): any {
  return {
    openapi: '3.1.0',
    info: { title: 'Items', version: '1.2.0' },
    security: [],
    paths: {
      '/items/': {
        get: {
          operationId: 'listItems',
          parameters: [{ name: 'limit', in: 'query', required: false, schema: { type: 'integer', minimum: 1, maximum: 100 } }],
          responses: {
            '200': {
              description: 'A page.',
              headers: { 'X-Cache': { required: true, schema: { type: 'string', enum: ['HIT', 'MISS'] } } },
              content: { 'application/json': { schema: { type: 'array', items: { $ref: '#/components/schemas/Item' } } } },
            },
          },
        },
        post: {
          operationId: 'createItem',
          requestBody: { required: true, content: { 'application/json': { schema: { $ref: '#/components/schemas/ItemCreate' } } } },
          responses: {
            '201': { description: 'Created.', content: { 'application/json': { schema: { $ref: '#/components/schemas/Item' } } } },
          },
        },
      },
      '/items/{id}': {
        parameters: [{ name: 'id', in: 'path', required: true, schema: { type: 'integer' } }],
        delete: { operationId: 'deleteItem', security: [{ bearerAuth: [] }], responses: { '204': { description: 'Deleted.' } } },
      },
    },
    components: {
      securitySchemes: { bearerAuth: { type: 'http', scheme: 'bearer' } },
      schemas: {
        Name: { type: 'string', minLength: 1, maxLength: 50 },
        ItemCreate: {
          type: 'object',
          required: ['name'],
          additionalProperties: false,
          properties: { name: { $ref: '#/components/schemas/Name' }, note: { type: ['string', 'null'] } },
        },
        Item: {
          type: 'object',
          required: ['id', 'name', 'email'],
          additionalProperties: false,
          properties: {
            id: { type: 'integer' },
            name: { type: 'string' },
            email: { type: 'string', format: 'email' },
            nickname: { type: 'string' },
          },
        },
      },
    },
  };
}

const schemas = (spec: any) => spec.components.schemas;
const before = await dereference(stringify(baseSpec()));

/** Compares the base contract with an edited copy: the lines that break and those that do not. */
async function diff(edit: (spec: any) => void): Promise<{ breaking: string[]; compatible: string[] }> {
  const after = baseSpec();
  edit(after);
  const changes = compareContracts(before, await dereference(stringify(after)));
  return {
    breaking: changes.filter((c) => c.breaking).map(formatChange),
    compatible: changes.filter((c) => !c.breaking).map(formatChange),
  };
}

t.test('documentation, x- extensions and keywords written beside a $ref change nothing', async (t) => {
  t.same(
    await diff((spec) => {
      schemas(spec).Item.properties.name.description = 'What it is called.';
      schemas(spec).Item.properties.name.example = 'Dune';
      schemas(spec).Item.properties.name['x-sort'] = true;
      spec.paths['/items/'].get['x-cache-ttl'] = 10;
      spec.paths['/items/'].get.responses['200'].content['application/json'].examples = { one: { value: [] } };
      spec.tags = [{ name: 'items' }];
      // The same schema, now behind a $ref that carries an extension (how openapi.yaml writes created_at).
      schemas(spec).Item.properties.name = { $ref: '#/components/schemas/Text', 'x-filter': ['eq'] };
      schemas(spec).Text = { type: 'string' };
    }),
    { breaking: [], compatible: [] },
  );
});

t.test('nullable: a response that may hold null breaks readers; a request that may hold null breaks no sender', async (t) => {
  t.same(
    await diff((spec) => {
      schemas(spec).Item.properties.email.type = ['string', 'null'];
      schemas(spec).Item.properties.nickname = { anyOf: [{ type: 'string' }, { type: 'null' }] };
      schemas(spec).Name.type = ['string', 'null'];
      schemas(spec).ItemCreate.properties.note.type = 'string';
    }),
    {
      breaking: [
        'GET /items/ response 200 (application/json) [].email.type: added "null"',
        'GET /items/ response 200 (application/json) [].nickname.anyOf.1: added',
        'POST /items/ request body (application/json) note.type: removed "null"',
        'POST /items/ response 201 (application/json) email.type: added "null"',
        'POST /items/ response 201 (application/json) nickname.anyOf.1: added',
      ],
      compatible: ['POST /items/ request body (application/json) name.type: added "null"'],
    },
  );
});

t.test('types: a response type that admits more values breaks', async (t) => {
  t.same(await diff((spec) => (schemas(spec).Item.properties.id.type = 'number')), {
    breaking: [
      'GET /items/ response 200 (application/json) [].id.type: added "number"',
      'POST /items/ response 201 (application/json) id.type: added "number"',
    ],
    compatible: [
      'GET /items/ response 200 (application/json) [].id.type: removed "integer"',
      'POST /items/ response 201 (application/json) id.type: removed "integer"',
    ],
  });
});

t.test('operations and security schemes: added ones are compatible; a changed operationId or new authentication breaks', async (t) => {
  t.same(
    await diff((spec) => {
      spec.paths['/items/{id}'].get = { operationId: 'getItem', responses: { '200': { description: 'The item.' } } };
      spec.paths['/items/{id}'].delete.operationId = 'removeItem';
      spec.paths['/items/{id}'].delete.security = [];
      spec.paths['/items/'].get.security = [{ bearerAuth: [] }];
      spec.components.securitySchemes.apiKey = { type: 'apiKey', in: 'header', name: 'X-Key' };
    }),
    {
      breaking: ['GET /items/ security: added', 'DELETE /items/{id} operationId: "deleteItem" → "removeItem"'],
      compatible: ['DELETE /items/{id} security[0]: removed', 'GET /items/{id}: added', 'components securitySchemes apiKey: added'],
    },
  );
});

t.test('properties: a removed one breaks senders where no others are allowed, and readers always', async (t) => {
  t.same(
    await diff((spec) => {
      delete schemas(spec).ItemCreate.properties.note;
      delete schemas(spec).Item.properties.nickname;
      schemas(spec).Item.properties.created_at = { type: 'string' };
    }),
    {
      breaking: [
        'GET /items/ response 200 (application/json) [].nickname: removed',
        'POST /items/ request body (application/json) note: removed',
        'POST /items/ response 201 (application/json) nickname: removed',
      ],
      compatible: [
        'GET /items/ response 200 (application/json) [].created_at: added',
        'POST /items/ response 201 (application/json) created_at: added',
      ],
    },
  );
});

t.test('response headers: a new value or a header no longer guaranteed breaks readers', async (t) => {
  t.same(
    await diff((spec) => {
      const cache = spec.paths['/items/'].get.responses['200'].headers['X-Cache'];
      cache.schema.enum.push('STALE');
      cache.required = false;
    }),
    {
      breaking: [
        `GET /items/ response 200 header 'X-Cache' required: true → false`,
        `GET /items/ response 200 header 'X-Cache' enum: added "STALE"`,
      ],
      compatible: [],
    },
  );
});

t.test('a recursive schema is compared without looping', async (t) => {
  const tree = (maxLength: number): any => {
    const spec = baseSpec();
    const children = { type: 'array', items: { $ref: '#/components/schemas/Node' } };
    schemas(spec).Node = { type: 'object', properties: { label: { type: 'string', maxLength }, children } };
    spec.paths['/items/'].post.requestBody.content['application/json'].schema = { $ref: '#/components/schemas/Node' };
    return spec;
  };
  const changes = compareContracts(await dereference(stringify(tree(10))), await dereference(stringify(tree(5))));
  t.same(changes.map(formatChange), ['POST /items/ request body (application/json) label.maxLength: 10 → 5']);
});

t.test('a contract with a $ref that leads nowhere is refused', async (t) => {
  await t.rejects(dereference('openapi: 3.1.0\npaths:\n  /x: {$ref: "#/nope"}\n'), { message: "Can't resolve $ref at #/paths/~1x" });
  await t.rejects(dereference('just text'), { message: 'not an OpenAPI document (no `openapi` field)' });
});

t.test('the verdict: a break passes only with a major bump of info.version', async (t) => {
  const change = { breaking: true, location: 'GET /x', message: 'removed' };
  t.same(verdict([change], '1.2.0', '1.3.0'), {
    exitCode: 1,
    line: 'Verdict: FAIL (1 breaking change, and info.version "1.3.0" is not a new major version: undo them, or set info.version to 2.0.0 if the break is deliberate)',
  });
  t.same(verdict([change], '1.2.0', '2.0.0'), {
    exitCode: 0,
    line: "Verdict: pass (1 breaking change accepted: info.version's major was bumped, 1.2.0 → 2.0.0)",
  });
  t.same(verdict([change], 'draft', 'final'), {
    exitCode: 1,
    line: 'Verdict: FAIL (1 breaking change, and info.version "final" is not a new major version: undo them, or set info.version to a new major version if the break is deliberate)',
  });
  t.same(
    verdict(
      [
        { ...change, breaking: false },
        { ...change, breaking: false },
      ],
      '1.2.0',
      '1.2.0',
    ),
    { exitCode: 0, line: 'Verdict: pass (2 compatible changes, nothing breaks)' },
  );
  t.same(verdict([], '1.2.0', '1.2.0'), { exitCode: 0, line: 'Verdict: pass (no changes)' });
  const unchanged = formatReport([], verdict([], '1.2.0', '1.2.0'), 'openapi.yaml at HEAD');
  t.equal(unchanged, 'openapi.yaml at HEAD\n\nno changes\n\nVerdict: pass (no changes)\n');
});

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a command to completion, whatever its exit code. */
function run(file: string, args: string[], cwd: string): Promise<Run> {
  const env = {
    ...process.env,
    GIT_AUTHOR_NAME: 'Test',
    GIT_AUTHOR_EMAIL: 'test@example.com',
    GIT_COMMITTER_NAME: 'Test',
    GIT_COMMITTER_EMAIL: 'test@example.com',
  };
  return new Promise((resolve) => {
    execFile(file, args, { cwd, env }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : null) : 0, stdout, stderr });
    });
  });
}

t.test('the CLI on a git repository: no contract to compare with, a break, a major bump, usage errors', async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), 'contract-diff-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const repo = path.join(dir, 'repo');
  const git = (cwd: string, ...args: string[]) => run('git', args, cwd);
  const contractDiff = (cwd: string, ...args: string[]) =>
    run(process.execPath, ['--import', import.meta.resolve('tsx'), path.join(root, 'scripts/contract-diff.ts'), ...args], cwd);
  /** A clone of the repository whose working tree holds `contract`. */
  const cloneWith = async (name: string, contract: string) => {
    const clone = path.join(dir, name);
    await git(dir, 'clone', '--quiet', repo, clone);
    await writeFile(path.join(clone, 'openapi.yaml'), contract);
    return clone;
  };

  await mkdir(repo);
  await git(repo, 'init', '--quiet');
  await writeFile(path.join(repo, 'README.md'), 'no contract yet\n');
  await git(repo, 'add', '.');
  await git(repo, 'commit', '--quiet', '-m', 'start');
  await writeFile(path.join(repo, 'openapi.yaml'), stringify(baseSpec()));
  await git(repo, 'add', '.');
  t.equal((await git(repo, 'commit', '--quiet', '-m', 'contract')).code, 0);

  const broken = baseSpec();
  schemas(broken).Name.maxLength = 20;
  broken.paths['/items/'].get.parameters.push({ name: 'q', in: 'query', schema: { type: 'string' } });
  const bumped = { ...broken, info: { ...broken.info, version: '2.0.0' } };
  // Independent runs, side by side.
  const [noContract, unknownRef, usage, failed, accepted] = await Promise.all([
    contractDiff(repo, 'HEAD~1'),
    contractDiff(repo, 'no-such-ref'),
    contractDiff(repo),
    cloneWith('broken', stringify(broken)).then((clone) => contractDiff(clone, 'HEAD')),
    cloneWith('bumped', stringify(bumped)).then((clone) => contractDiff(clone, 'HEAD')),
  ]);

  t.same(noContract, {
    code: 0,
    stdout: 'openapi.yaml does not exist at HEAD~1: no previous contract to compare with, nothing can break.\n',
    stderr: '',
  });
  t.same(failed, {
    code: 1,
    stdout: [
      'openapi.yaml at HEAD (info.version 1.2.0) → working tree (info.version 1.2.0)',
      '',
      'Breaking (1):',
      '  POST /items/ request body (application/json) name.maxLength: 50 → 20',
      '',
      'Compatible (1):',
      "  GET /items/ query parameter 'q': added",
      '',
      'Verdict: FAIL (1 breaking change, and info.version "1.2.0" is not a new major version: undo them, or set info.version to 2.0.0 if the break is deliberate)',
      '',
    ].join('\n'),
    stderr: '',
  });
  t.equal(accepted.code, 0, accepted.stderr);
  t.match(accepted.stdout, "Verdict: pass (1 breaking change accepted: info.version's major was bumped, 1.2.0 → 2.0.0)\n");
  t.same(unknownRef, { code: 2, stdout: '', stderr: "contract:diff: unknown git ref 'no-such-ref'\n" });
  t.same(usage, {
    code: 2,
    stdout: '',
    stderr: 'contract:diff: usage: npm run contract:diff -- <git-ref>   (compares openapi.yaml with its version at <git-ref>)\n',
  });
});
