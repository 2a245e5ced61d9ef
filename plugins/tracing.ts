/**
 * OpenTelemetry tracing. Nothing imports this module unless OTEL_EXPORTER_OTLP_ENDPOINT is set
 * (src/server.ts loads it first, then the app), so with tracing off no part of the SDK is loaded.
 */
import diagnostics from 'node:diagnostics_channel';
import { getKeyIndexes } from '@ioredis/commands';
import {
  type Attributes,
  context,
  propagation,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  trace,
  type Tracer,
} from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { OTLPTraceExporter as JsonTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtobufTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { defaultResource, detectResources, envDetector, resourceFromAttributes } from '@opentelemetry/resources';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BatchSpanProcessor,
  ParentBasedSampler,
  type Sampler,
  TraceIdRatioBasedSampler,
  TracerProvider,
} from '@opentelemetry/sdk-trace';
import {
  ATTR_HTTP_REQUEST_METHOD,
  ATTR_HTTP_RESPONSE_STATUS_CODE,
  ATTR_HTTP_ROUTE,
  ATTR_SERVER_ADDRESS,
  ATTR_SERVER_PORT,
  ATTR_SERVICE_NAME,
  ATTR_URL_PATH,
  ATTR_URL_SCHEME,
} from '@opentelemetry/semantic-conventions';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import type { PostgresPool, PostgresPoolClient, PostgresQueryResult } from 'kysely';
import type { TracingConfig } from './config.js';

// Database attributes of the semantic conventions that are stable since after the version this service pins.
const ATTR_DB_SYSTEM_NAME = 'db.system.name';
const ATTR_DB_NAMESPACE = 'db.namespace';
const ATTR_DB_OPERATION_NAME = 'db.operation.name';
const ATTR_DB_QUERY_TEXT = 'db.query.text';

/** What the app needs from tracing; src/app.ts wires each part in, without importing any of OpenTelemetry. */
export interface Tracing {
  /** Registered before every other plugin: one server span per request, the request's work inside it. */
  requestSpans: FastifyPluginAsync;
  /** Fields for each log line: the ids of the span it is written in (a pino mixin). */
  logFields: () => Record<string, string>;
  /** The database pool with a span around each statement of a request. */
  tracedPool: (pool: PostgresPool) => PostgresPool;
  /** Sends the spans still waiting, then stops. */
  shutdown(): Promise<void>;
}

function samplerOf({ sampler, samplerRatio }: TracingConfig): Sampler {
  const ratio = new TraceIdRatioBasedSampler(samplerRatio);
  switch (sampler) {
    case 'always_on':
      return new AlwaysOnSampler();
    case 'always_off':
      return new AlwaysOffSampler();
    case 'traceidratio':
      return ratio;
    case 'parentbased_always_off':
      return new ParentBasedSampler({ root: new AlwaysOffSampler() });
    case 'parentbased_traceidratio':
      return new ParentBasedSampler({ root: ratio });
    case 'parentbased_always_on':
      return new ParentBasedSampler({ root: new AlwaysOnSampler() });
  }
}

/** Where the database is, for the attributes of SQL spans; the embedded database has no server. */
function databaseAttributes(databaseUrl: string | null): Attributes {
  if (!databaseUrl) return { [ATTR_DB_SYSTEM_NAME]: 'postgresql' };
  const url = new URL(databaseUrl);
  return {
    [ATTR_DB_SYSTEM_NAME]: 'postgresql',
    [ATTR_DB_NAMESPACE]: decodeURIComponent(url.pathname.slice(1)),
    [ATTR_SERVER_ADDRESS]: url.hostname,
    [ATTR_SERVER_PORT]: Number(url.port || 5432),
  };
}

/** The active span, when there is one: statements and commands outside a request (start-up, timers) are not traced. */
const activeSpan = () => trace.getSpan(context.active());

function endWithError(span: Span, error: unknown): void {
  span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
  span.end();
}

/**
 * A pool whose clients wrap each statement in a CLIENT span: its first keyword (`SELECT`, `INSERT`,
 * …) is the name, the statement the text. Kysely sends every value as a parameter (`$1`), and
 * parameters are never recorded.
 */
function tracedPool(tracer: Tracer, pool: PostgresPool, attributes: Attributes): PostgresPool {
  const traced = (client: PostgresPoolClient): PostgresPoolClient => ({
    query: ((statement: unknown, parameters?: readonly unknown[]) => {
      if (typeof statement !== 'string' || !activeSpan()) return (client.query as (...args: unknown[]) => unknown)(statement, parameters);
      const operation = (/^\s*([A-Za-z]+)/.exec(statement)?.[1] ?? 'query').toUpperCase();
      const span = tracer.startSpan(operation, {
        kind: SpanKind.CLIENT,
        attributes: { ...attributes, [ATTR_DB_OPERATION_NAME]: operation, [ATTR_DB_QUERY_TEXT]: statement },
      });
      return client.query(statement, parameters ?? []).then(
        (result: PostgresQueryResult<unknown>) => {
          span.end();
          return result;
        },
        (error: unknown) => {
          endWithError(span, error);
          throw error;
        },
      );
    }) as PostgresPoolClient['query'],
    release: () => client.release(),
  });
  return {
    connect: async () => traced(await pool.connect()),
    end: () => pool.end(),
    options: pool.options,
  };
}

/** What ioredis publishes on its `ioredis:command` tracing channel (arguments already stripped of values it deems unsafe). */
interface RedisCommand {
  command: string;
  args: string[];
  database: number;
  serverAddress: string;
  serverPort: number | undefined;
  error?: unknown;
  span?: Span;
}

/**
 * A CLIENT span for each Redis command sent inside a request, from ioredis' diagnostics channel:
 * the command's name and its keys, never a value.
 */
function traceRedisCommands(tracer: Tracer): () => void {
  const channel = diagnostics.tracingChannel<string, RedisCommand>('ioredis:command');
  const handlers = {
    start(message: RedisCommand) {
      if (!activeSpan()) return;
      const name = message.command.toUpperCase();
      const keys = getKeyIndexes(message.command, message.args).map((index) => message.args[index]);
      message.span = tracer.startSpan(name, {
        kind: SpanKind.CLIENT,
        attributes: {
          [ATTR_DB_SYSTEM_NAME]: 'redis',
          [ATTR_DB_OPERATION_NAME]: name,
          [ATTR_DB_QUERY_TEXT]: [name, ...keys].join(' '),
          [ATTR_DB_NAMESPACE]: String(message.database),
          [ATTR_SERVER_ADDRESS]: message.serverAddress,
          ...(message.serverPort !== undefined && { [ATTR_SERVER_PORT]: message.serverPort }),
        },
      });
    },
    end() {},
    asyncStart() {},
    asyncEnd(message: RedisCommand) {
      if (message.span && message.error === undefined) message.span.end();
    },
    error(message: RedisCommand) {
      if (message.span) endWithError(message.span, message.error);
    },
  };
  channel.subscribe(handlers);
  return () => channel.unsubscribe(handlers);
}

/**
 * Whether a proxy that TRUST_PROXY trusts passed the request on (it named the client in
 * `X-Forwarded-For`). Only such a request's `traceparent` is continued: a client's own would
 * choose whether its requests are traced, whatever the sampler's ratio (with `traceidratio`, by
 * picking the trace id), and put them in any trace it likes.
 */
function cameThroughTrustedProxy(request: FastifyRequest): boolean {
  // Fastify's `ips`: the socket's address, then each address forwarded by a trusted hop (none without TRUST_PROXY).
  return (request.ips?.length ?? 0) > 1;
}

/**
 * One SERVER span per request, named `<METHOD> <route template>` (the method alone when no route
 * matched), continuing a trusted proxy's W3C `traceparent` (cameThroughTrustedProxy). Everything the request does after its
 * first hook runs inside the span, the body's stream events included (they are bound to it).
 */
function requestSpans(tracer: Tracer): FastifyPluginAsync {
  const spans = new WeakMap<FastifyRequest, Span>();
  const end = (request: FastifyRequest, reply: FastifyReply) => {
    const span = spans.get(request);
    if (!span) return;
    spans.delete(request);
    span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, reply.statusCode);
    if (reply.statusCode >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
    span.end();
  };
  return fp(
    async (app) => {
      app.addHook('onRequest', (request, reply, done) => {
        const parent = cameThroughTrustedProxy(request) ? propagation.extract(ROOT_CONTEXT, request.headers) : ROOT_CONTEXT;
        const route = request.routeOptions.config.httpRoute;
        const span = tracer.startSpan(
          route === undefined ? request.method : `${request.method} ${route}`,
          {
            kind: SpanKind.SERVER,
            attributes: {
              [ATTR_HTTP_REQUEST_METHOD]: request.method,
              [ATTR_URL_PATH]: request.url.split('?', 1)[0],
              [ATTR_URL_SCHEME]: request.protocol,
              ...(route !== undefined && { [ATTR_HTTP_ROUTE]: route }),
            },
          },
          parent,
        );
        spans.set(request, span);
        const inSpan = trace.setSpan(parent, span);
        context.bind(inSpan, request.raw);
        context.bind(inSpan, reply.raw);
        context.with(inSpan, done);
      });
      app.addHook('onResponse', (request, reply, done) => {
        end(request, reply);
        done();
      });
      app.addHook('onRequestAbort', (request, done) => {
        const span = spans.get(request);
        spans.delete(request);
        span?.setStatus({ code: SpanStatusCode.ERROR, message: 'the client closed the connection' });
        span?.end();
        done();
      });
    },
    { name: 'tracing', fastify: '5.x' },
  );
}

/**
 * Starts OpenTelemetry: W3C trace context, spans batched to the OTLP/HTTP endpoint in protobuf or
 * JSON, the resource from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (service.name
 * `contacts-service` by default). The exporter reads the other OTEL_EXPORTER_OTLP_* variables itself.
 */
export function startTracing(config: TracingConfig, databaseUrl: string | null): Tracing {
  const Exporter = config.protocol === 'http/json' ? JsonTraceExporter : ProtobufTraceExporter;
  const provider = new TracerProvider({
    resource: defaultResource()
      .merge(resourceFromAttributes({ [ATTR_SERVICE_NAME]: 'contacts-service' }))
      .merge(detectResources({ detectors: [envDetector] })),
    sampler: samplerOf(config),
    spanProcessors: [new BatchSpanProcessor({ exporter: new Exporter(), scheduledDelayMillis: config.exportDelayMs })],
  });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(provider);
  const tracer = trace.getTracer('contacts-service');
  const stopRedis = traceRedisCommands(tracer);
  const database = databaseAttributes(databaseUrl);
  return {
    requestSpans: requestSpans(tracer),
    logFields: (): Record<string, string> => {
      const span = activeSpan();
      if (!span) return {};
      const { traceId, spanId } = span.spanContext();
      return { trace_id: traceId, span_id: spanId };
    },
    tracedPool: (pool) => tracedPool(tracer, pool, database),
    async shutdown() {
      stopRedis();
      await provider.shutdown();
    },
  };
}
