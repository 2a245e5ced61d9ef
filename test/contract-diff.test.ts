/**
 * `npm run contract:diff`: each breaking rule and several compatible changes on a small contract
 * (through the real YAML parsing and dereferencing), the verdict, and the CLI on a temporary git repo.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { stringify } from 'yaml';
import { compareContracts, dereferenceContract, formatChange, verdict } from '../scripts/contract-diff/compare.js';

const root = fileURLToPath(new URL('..', import.meta.url));

/** A small contract with a shared request schema, a shared (recursive) response schema, a header enum and security. */
function baseSpec(): any {
  return {
    openapi: '3.1.0',
    info: { title: 'Items', version: '1.2.0' },
    security: [],
    paths: {
      '/items/': {
        get: {
          operationId: 'listItems',
          parameters: [{ name: 'limit', in: 'query', required: false, schema: { type: 'integer', minimum: 1, maximum: 100, default: 10 } }],
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
            '201': {
              description: 'Created.',
              headers: { Location: { required: true, schema: { type: 'string' } } },
              content: { 'application/json': { schema: { $ref: '#/components/schemas/Item' } } },
            },
            '422': { description: 'Invalid.', content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } },
          },
        },
      },
      '/items/{id}': {
        parameters: [{ name: 'id', in: 'path', required: true, schema: { type: 'integer' } }],
        delete: {
          operationId: 'deleteItem',
          security: [{ bearerAuth: [] }],
          responses: { '204': { description: 'Deleted.' } },
        },
      },
    },
    components: {
      securitySchemes: { bearerAuth: { type: 'http', scheme: 'bearer' } },
      schemas: {
        Error: { type: 'object', required: ['detail'], properties: { detail: { type: 'string' } } },
        ItemCreate: {
          type: 'object',
          required: ['name'],
          additionalProperties: false,
          properties: {
            name: { type: 'string', minLength: 1, maxLength: 50, description: 'The name.' },
            kind: { type: 'string', enum: ['book', 'film'] },
            note: { type: ['string', 'null'] },
          },
        },
        Item: {
          type: 'object',
          required: ['id', 'name', 'kind'],
          additionalProperties: false,
          properties: {
            id: { type: 'integer' },
            name: { type: 'string' },
            kind: { type: 'string', enum: ['book', 'film'] },
            nickname: { type: 'string' },
            parent: { $ref: '#/components/schemas/Item' },
          },
        },
      },
    },
  };
}

interface Outcome {
  breaking: string[];
  compatible: string[];
  exitCode: number;
}

/** Compares the base contract with an edited copy, both going through YAML and dereferencing. */
function diff(edit: (spec: any) => void, versionAfter?: string): Outcome {
  const after = baseSpec();
  edit(after);
  if (versionAfter) after.info.version = versionAfter;
  const changes = compareContracts(dereferenceContract(stringify(baseSpec())), dereferenceContract(stringify(after)));
  return {
    breaking: changes.filter((c) => c.breaking).map(formatChange),
    compatible: changes.filter((c) => !c.breaking).map(formatChange),
    exitCode: verdict(changes, '1.2.0', after.info.version).exitCode,
  };
}

const schemas = (spec: any) => spec.components.schemas;

t.test('an identical contract, or one whose descriptions and examples changed, has no changes', async (t) => {
  t.same(diff(() => {}), { breaking: [], compatible: [], exitCode: 0 });
  t.same(
    diff((spec) => {
      schemas(spec).ItemCreate.properties.name.description = 'What it is called.';
      schemas(spec).Item.properties.name.example = 'Dune';
      spec.paths['/items/'].get.responses['200'].description = 'A page of items.';
    }),
    { breaking: [], compatible: [], exitCode: 0 },
  );
});

t.test('breaking: operations', async (t) => {
  t.same(diff((spec) => delete spec.paths['/items/{id}']), {
    breaking: ['DELETE /items/{id}: operation was removed'],
    compatible: [],
    exitCode: 1,
  });
  t.same(
    diff((spec) => {
      spec.paths['/things/{id}'] = spec.paths['/items/{id}'];
      delete spec.paths['/items/{id}'];
    }),
    { breaking: ['DELETE /items/{id}: operation moved to DELETE /things/{id}'], compatible: [], exitCode: 1 },
    'a changed path is found by its operationId',
  );
  t.same(diff((spec) => (spec.paths['/items/{id}'].delete.operationId = 'removeItem')), {
    breaking: ['DELETE /items/{id}: operationId changed from "deleteItem" to "removeItem"'],
    compatible: [],
    exitCode: 1,
  });
  t.same(diff((spec) => (spec.paths['/items/'].get.security = [{ bearerAuth: [] }])), {
    breaking: ['GET /items/: now requires authentication (bearerAuth)'],
    compatible: [],
    exitCode: 1,
  });
  t.same(diff((spec) => (spec.paths['/items/{id}'].delete.security = [{ apiKey: [] }])), {
    breaking: ["DELETE /items/{id}: security requirement 'bearerAuth' was removed"],
    compatible: ["DELETE /items/{id}: security alternative 'apiKey' added"],
    exitCode: 1,
  });
});

t.test('breaking: request parameters', async (t) => {
  const limit = (spec: any) => spec.paths['/items/'].get.parameters[0];
  t.same(diff((spec) => spec.paths['/items/'].get.parameters.push({ name: 'q', in: 'query', required: true, schema: { type: 'string' } })), {
    breaking: ["GET /items/: query parameter 'q' is new and required"],
    compatible: [],
    exitCode: 1,
  });
  t.same(diff((spec) => (limit(spec).required = true)), {
    breaking: ["GET /items/: query parameter 'limit' is now required"],
    compatible: [],
    exitCode: 1,
  });
  t.same(diff((spec) => (limit(spec).in = 'header')), {
    breaking: ["GET /items/: query parameter 'limit' moved to header"],
    compatible: [],
    exitCode: 1,
  });
  t.same(diff((spec) => (limit(spec).name = 'page_size')), {
    breaking: ["GET /items/: query parameter 'limit' was removed"],
    compatible: ["GET /items/: query parameter 'page_size' is new (optional)"],
    exitCode: 1,
  }, 'a renamed parameter');
  t.same(diff((spec) => (limit(spec).schema.maximum = 50)), {
    breaking: ["GET /items/ query parameter 'limit': maximum lowered from 100 to 50"],
    compatible: [],
    exitCode: 1,
  });
  t.same(diff((spec) => (limit(spec).schema.default = 20)), {
    breaking: ["GET /items/ query parameter 'limit': default changed from 10 to 20"],
    compatible: [],
    exitCode: 1,
  });
});

t.test('breaking: request bodies narrowed', async (t) => {
  const create = (spec: any) => schemas(spec).ItemCreate;
  t.same(diff((spec) => (create(spec).properties.name.maxLength = 20)), {
    breaking: ["POST /items/ request body: 'name' maxLength lowered from 50 to 20"],
    compatible: [],
    exitCode: 1,
  });
  t.same(diff((spec) => (create(spec).properties.name.minLength = 3)), {
    breaking: ["POST /items/ request body: 'name' minLength raised from 1 to 3"],
    compatible: [],
    exitCode: 1,
  });
  t.same(diff((spec) => (create(spec).properties.name.pattern = '^[a-z]+$')), {
    breaking: [`POST /items/ request body: 'name' pattern "^[a-z]+$" added`],
    compatible: [],
    exitCode: 1,
  });
  t.same(
    diff((spec) => {
      create(spec).properties.colour = { type: 'string' };
      create(spec).required.push('colour');
    }),
    { breaking: ["POST /items/ request body: property 'colour' is new and required"], compatible: [], exitCode: 1 },
  );
  t.same(diff((spec) => create(spec).required.push('kind')), {
    breaking: ["POST /items/ request body: property 'kind' is now required"],
    compatible: [],
    exitCode: 1,
  });
  t.same(diff((spec) => (create(spec).properties.kind.enum = ['book'])), {
    breaking: [`POST /items/ request body: 'kind' enum value "film" removed`],
    compatible: [],
    exitCode: 1,
  });
  t.same(diff((spec) => (create(spec).properties.note.type = 'string')), {
    breaking: ["POST /items/ request body: 'note' type narrowed from string | null to string"],
    compatible: [],
    exitCode: 1,
  });
  t.same(diff((spec) => delete create(spec).properties.note), {
    breaking: ["POST /items/ request body: property 'note' was removed"],
    compatible: [],
    exitCode: 1,
  }, 'a removed property is refused where additionalProperties is false');
  t.same(diff((spec) => (spec.paths['/items/'].post.requestBody.content = { 'application/xml': { schema: { type: 'string' } } })), {
    breaking: ["POST /items/: request body media type 'application/json' was removed"],
    compatible: ["POST /items/: request body media type 'application/xml' added"],
    exitCode: 1,
  });
});

t.test('breaking: a keyword without a rule of its own counts both ways', async (t) => {
  t.same(diff((spec) => (spec.paths['/items/'].get.parameters[0].schema.multipleOf = 5)), {
    breaking: ["GET /items/ query parameter 'limit': multipleOf 5 added"],
    compatible: [],
    exitCode: 1,
  });
  t.same(diff((spec) => (schemas(spec).Item.properties.name.not = { const: '' })), {
    breaking: ["GET /items/ response 200 body: '[].name' not changed", "POST /items/ response 201 body: 'name' not changed"],
    compatible: [],
    exitCode: 1,
  }, 'even a change that only narrows a response');
});

t.test('breaking: responses widened or taken away', async (t) => {
  const item = (spec: any) => schemas(spec).Item;
  t.same(
    diff((spec) => delete item(spec).properties.nickname),
    {
      breaking: ["GET /items/ response 200 body: property '[].nickname' was removed", "POST /items/ response 201 body: property 'nickname' was removed"],
      compatible: [],
      exitCode: 1,
    },
    'every operation returning the schema is named, and the recursive `parent` does not repeat it',
  );
  t.same(diff((spec) => (item(spec).required = ['id', 'name'])), {
    breaking: ["GET /items/ response 200 body: property '[].kind' is no longer required", "POST /items/ response 201 body: property 'kind' is no longer required"],
    compatible: [],
    exitCode: 1,
  });
  t.same(diff((spec) => item(spec).properties.kind.enum.push('music')), {
    breaking: [`GET /items/ response 200 body: '[].kind' enum value "music" added`, `POST /items/ response 201 body: 'kind' enum value "music" added`],
    compatible: [],
    exitCode: 1,
  }, 'a new enum value reaches clients that switch over the old ones');
  t.same(diff((spec) => spec.paths['/items/'].get.responses['200'].headers['X-Cache'].schema.enum.push('STALE')), {
    breaking: [`GET /items/ response 200 header 'X-Cache': enum value "STALE" added`],
    compatible: [],
    exitCode: 1,
  });
  t.same(diff((spec) => (item(spec).properties.id.type = 'number')), {
    breaking: ["GET /items/ response 200 body: '[].id' type widened from integer to number", "POST /items/ response 201 body: 'id' type widened from integer to number"],
    compatible: [],
    exitCode: 1,
  });
  t.same(diff((spec) => (item(spec).properties.name.type = 'integer')), {
    breaking: ["GET /items/ response 200 body: '[].name' type changed from string to integer", "POST /items/ response 201 body: 'name' type changed from string to integer"],
    compatible: [],
    exitCode: 1,
  });
  t.same(diff((spec) => (item(spec).additionalProperties = true)), {
    breaking: ["GET /items/ response 200 body: '[]' additional properties now allowed", 'POST /items/ response 201 body: additional properties now allowed'],
    compatible: [],
    exitCode: 1,
  });
  t.same(
    diff((spec) => {
      const responses = spec.paths['/items/'].post.responses;
      responses['200'] = responses['201'];
      delete responses['201'];
    }),
    { breaking: ['POST /items/: response 201 was removed'], compatible: ['POST /items/: response 200 added'], exitCode: 1 },
    'a changed success status',
  );
  t.same(diff((spec) => delete spec.paths['/items/'].post.responses['201'].headers.Location), {
    breaking: ["POST /items/ response 201: header 'Location' was removed"],
    compatible: [],
    exitCode: 1,
  });
  t.same(diff((spec) => (spec.paths['/items/'].post.responses['201'].headers.Location.required = false)), {
    breaking: ["POST /items/ response 201: header 'Location' is no longer required"],
    compatible: [],
    exitCode: 1,
  });
  t.same(
    diff((spec) => {
      const content = spec.paths['/items/'].post.responses['201'].content;
      content['application/hal+json'] = content['application/json'];
      delete content['application/json'];
    }),
    { breaking: ["POST /items/ response 201: media type 'application/json' was removed"], compatible: ["POST /items/ response 201: media type 'application/hal+json' added"], exitCode: 1 },
    'a changed content type',
  );
});

t.test('compatible: additions and relaxations', async (t) => {
  const create = (spec: any) => schemas(spec).ItemCreate;
  t.same(
    diff((spec) => {
      spec.paths['/items/{id}'].get = { operationId: 'getItem', responses: { '200': { description: 'The item.' } } };
      spec.paths['/items/'].get.parameters.push({ name: 'q', in: 'query', schema: { type: 'string' } });
      create(spec).properties.colour = { type: 'string' };
      create(spec).properties.name.maxLength = 100;
      create(spec).properties.name.minLength = 0;
      create(spec).properties.kind.enum.push('music');
      create(spec).required = [];
      spec.paths['/items/'].get.parameters[0].schema.maximum = 1000;
    }),
    {
      breaking: [],
      compatible: [
        "GET /items/ query parameter 'limit': maximum raised from 100 to 1000",
        "GET /items/: query parameter 'q' is new (optional)",
        "POST /items/ request body: 'name' maxLength raised from 50 to 100",
        "POST /items/ request body: 'name' minLength lowered from 1 to 0",
        `POST /items/ request body: 'kind' enum value "music" added`,
        "POST /items/ request body: property 'colour' is new (optional)",
        "POST /items/ request body: property 'name' is no longer required",
        'GET /items/{id}: operation added',
      ],
      exitCode: 0,
    },
  );
  t.same(
    diff((spec) => {
      const item = schemas(spec).Item;
      item.properties.created_at = { type: 'string', format: 'date-time' };
      item.required.push('nickname');
      item.properties.name.maxLength = 50;
      spec.paths['/items/'].post.responses['409'] = { description: 'Conflict.' };
      delete spec.paths['/items/'].post.responses['422'];
      spec.paths['/items/'].post.responses['201'].headers['X-Request-Id'] = { schema: { type: 'string' } };
      spec.paths['/items/{id}'].delete.security = [];
    }),
    {
      breaking: [],
      compatible: [
        "GET /items/ response 200 body: '[].name' maxLength 50 added",
        "GET /items/ response 200 body: property '[].created_at' is new (optional)",
        "GET /items/ response 200 body: property '[].nickname' is now required",
        "POST /items/ response 201: header 'X-Request-Id' added",
        "POST /items/ response 201 body: 'name' maxLength 50 added",
        "POST /items/ response 201 body: property 'created_at' is new (optional)",
        "POST /items/ response 201 body: property 'nickname' is now required",
        'POST /items/: response 422 was removed',
        'POST /items/: response 409 added',
        'DELETE /items/{id}: no longer requires authentication',
      ],
      exitCode: 0,
    },
    'responses that promise more, or less variety, break no reader',
  );
  t.same(diff((spec) => (schemas(spec).ItemCreate.additionalProperties = true)), {
    breaking: [],
    compatible: ['POST /items/ request body: additional properties now allowed'],
    exitCode: 0,
  });
});

t.test('a recursive schema is compared to the bottom without looping', async (t) => {
  const tree = (maxLength: number): any => {
    const spec = baseSpec();
    spec.components.schemas.Node = {
      type: 'object',
      properties: { label: { type: 'string', maxLength }, children: { type: 'array', items: { $ref: '#/components/schemas/Node' } } },
    };
    spec.paths['/items/'].post.requestBody.content['application/json'].schema = { $ref: '#/components/schemas/Node' };
    return spec;
  };
  const changes = compareContracts(dereferenceContract(stringify(tree(10))), dereferenceContract(stringify(tree(5))));
  t.same(changes.map(formatChange), ["POST /items/ request body: 'label' maxLength lowered from 10 to 5"]);
});

t.test('the verdict: a break passes only with a major bump of info.version', async (t) => {
  const lowered = (spec: any) => (schemas(spec).ItemCreate.properties.name.maxLength = 20);
  t.equal((diff(lowered, '1.3.0')).exitCode, 1, 'a minor bump is not enough');
  t.equal((diff(lowered, '2.0.0')).exitCode, 0, 'a major bump accepts the break');
  const change = { breaking: true, location: 'GET /x', message: 'operation was removed' };
  t.same(verdict([change], '1.2.0', '1.3.0'), {
    exitCode: 1,
    line: 'Verdict: FAIL (1 breaking change, and info.version "1.3.0" is not a new major version: undo them, or set info.version to 2.0.0 if the break is deliberate)',
  });
  t.same(verdict([change], '1.2.0', '2.0.0'), { exitCode: 0, line: "Verdict: pass (1 breaking change accepted: info.version's major was bumped, 1.2.0 → 2.0.0)" });
  t.same(verdict([change], 'draft', 'final'), {
    exitCode: 1,
    line: 'Verdict: FAIL (1 breaking change, and info.version "final" is not a new major version: undo them, or set info.version to a new major version if the break is deliberate)',
  });
  t.same(verdict([{ ...change, breaking: false }, { ...change, breaking: false }], '1.2.0', '1.2.0'), { exitCode: 0, line: 'Verdict: pass (2 compatible changes, nothing breaks)' });
  t.same(verdict([], '1.2.0', '1.2.0'), { exitCode: 0, line: 'Verdict: pass (no changes)' });
});

t.test('a contract with a $ref that leads nowhere is refused', async (t) => {
  const spec = baseSpec();
  spec.paths['/items/'].post.requestBody.content['application/json'].schema = { $ref: '#/components/schemas/Nope' };
  t.throws(() => dereferenceContract(stringify(spec)), { message: "unresolved $ref '#/components/schemas/Nope'" });
  t.throws(() => dereferenceContract('just text'), { message: 'not an OpenAPI document (no `openapi` field)' });
  t.throws(() => dereferenceContract('openapi: 3.1.0\nloop: {$ref: "#/loop"}\n'), { message: "$ref '#/loop' refers to itself" });
});

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a command to completion, whatever its exit code. */
function run(file: string, args: string[], cwd: string): Promise<Run> {
  const env = { ...process.env, GIT_AUTHOR_NAME: 'Test', GIT_AUTHOR_EMAIL: 'test@example.com', GIT_COMMITTER_NAME: 'Test', GIT_COMMITTER_EMAIL: 'test@example.com' };
  return new Promise((resolve) => {
    execFile(file, args, { cwd, env }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : null) : 0, stdout, stderr });
    });
  });
}

t.test('the CLI on a git repository: no changes, a break, a major bump, usage errors', async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), 'contract-diff-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  const git = (...args: string[]) => run('git', args, dir);
  const contractDiff = (...args: string[]) => run(process.execPath, ['--import', import.meta.resolve('tsx'), path.join(root, 'scripts/contract-diff.ts'), ...args], dir);
  const writeSpec = (spec: any) => writeFile(path.join(dir, 'openapi.yaml'), stringify(spec));

  await git('init', '--quiet');
  await writeFile(path.join(dir, 'README.md'), 'no contract yet\n');
  await git('add', '.');
  await git('commit', '--quiet', '-m', 'start');
  await writeSpec(baseSpec());
  await git('add', '.');
  t.equal((await git('commit', '--quiet', '-m', 'contract')).code, 0);

  t.same(await contractDiff('HEAD'), {
    code: 0,
    stdout: 'openapi.yaml at HEAD (info.version 1.2.0) → working tree (info.version 1.2.0)\n\nno changes\n\nVerdict: pass (no changes)\n',
    stderr: '',
  });
  t.same(await contractDiff('HEAD~1'), {
    code: 0,
    stdout: 'openapi.yaml does not exist at HEAD~1: no previous contract to compare with, nothing can break.\n',
    stderr: '',
  });

  const broken = baseSpec();
  broken.components.schemas.ItemCreate.properties.name.maxLength = 20;
  broken.paths['/items/'].get.parameters.push({ name: 'q', in: 'query', schema: { type: 'string' } });
  await writeSpec(broken);
  t.same(await contractDiff('HEAD'), {
    code: 1,
    stdout: [
      'openapi.yaml at HEAD (info.version 1.2.0) → working tree (info.version 1.2.0)',
      '',
      'Breaking (1):',
      "  POST /items/ request body: 'name' maxLength lowered from 50 to 20",
      '',
      'Compatible (1):',
      "  GET /items/: query parameter 'q' is new (optional)",
      '',
      'Verdict: FAIL (1 breaking change, and info.version "1.2.0" is not a new major version: undo them, or set info.version to 2.0.0 if the break is deliberate)',
      '',
    ].join('\n'),
    stderr: '',
  });

  broken.info.version = '2.0.0';
  await writeSpec(broken);
  const bumped = await contractDiff('HEAD');
  t.equal(bumped.code, 0, bumped.stderr);
  t.match(bumped.stdout, "Verdict: pass (1 breaking change accepted: info.version's major was bumped, 1.2.0 → 2.0.0)\n");

  t.same(await contractDiff('no-such-ref'), { code: 2, stdout: '', stderr: "contract:diff: unknown git ref 'no-such-ref'\n" });
  t.same(await contractDiff(), { code: 2, stdout: '', stderr: 'contract:diff: usage: npm run contract:diff -- <git-ref>   (compares openapi.yaml with its version at <git-ref>)\n' });
  await writeFile(path.join(dir, 'openapi.yaml'), 'openapi: 3.1.0\npaths:\n  /x: {$ref: "#/nope"}\n');
  t.same(await contractDiff('HEAD'), { code: 2, stdout: '', stderr: "contract:diff: openapi.yaml is not a valid contract: unresolved $ref '#/nope'\n" });
});
