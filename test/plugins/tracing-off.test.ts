/**
 * Tracing off costs nothing: with OTEL_EXPORTER_OTLP_ENDPOINT unset, building the app and serving
 * requests loads no module of OpenTelemetry's SDK, nor plugins/tracing.ts. Every module this
 * process resolves (import and require alike) is recorded by a resolve hook installed before the
 * app is imported. prom-client requires the API facade (`@opentelemetry/api`), which alone does nothing.
 */
import { registerHooks } from 'node:module';
import t from 'tap';

const resolved: string[] = [];
registerHooks({
  resolve(specifier, context, nextResolve) {
    const result = nextResolve(specifier, context);
    resolved.push(result.url);
    return result;
  },
});
const { build } = await import('../helper.js');
const { as, contactBody, createContacts, createUser } = await import('../contacts/fixtures.js');

const sdkModules = () => resolved.filter((url) => /\/@opentelemetry\/(?!api\/)/.test(url) || /\/plugins\/tracing\.[jt]s$/.test(url));

t.test('with OTEL_EXPORTER_OTLP_ENDPOINT unset, no part of the OpenTelemetry SDK is loaded', async (t) => {
  const app = await build(t);
  const call = as(app, await createUser(app));
  const [contact] = await createContacts(call, [contactBody()]);
  t.equal((await call('GET', `/api/contacts/${contact!.id}`)).statusCode, 200);
  t.equal((await app.inject({ method: 'GET', url: '/metrics' })).statusCode, 200);

  t.ok(
    resolved.some((url) => url.endsWith('/src/app.ts')),
    'the hook saw the app load',
  );
  t.ok(
    resolved.some((url) => url.includes('/@opentelemetry/api/')),
    'and sees modules required from CommonJS (prom-client requires the API)',
  );
  t.same(sdkModules(), [], 'no SDK module, no plugins/tracing.ts');

  // The same hook sees the SDK once tracing's module is imported, so the check above can fail.
  await import('../../plugins/tracing.js');
  t.ok(
    sdkModules().some((url) => url.includes('/@opentelemetry/sdk-trace/')),
    'importing plugins/tracing.ts loads the SDK',
  );
});
