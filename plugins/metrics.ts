import type { FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';

/** A counter of this app, with the label values it starts at 0 (so every series exists from its first use). */
export interface CounterSpec<L extends string> {
  name: string;
  help: string;
  labelNames: readonly L[];
  series: readonly Record<L, string>[];
}

export interface Metrics {
  /** Where the plugins register what they measure; /metrics shows it beside Node's process metrics. */
  readonly registry: Registry;
  /** This app's counter `spec.name`, made on first use: for features, which own their counters but no plugin. */
  counter<L extends string>(spec: CounterSpec<L>): Counter<L>;
  /**
   * Tells `contacts_dependency_up{dependency}` how to see whether a dependency answers. A probe is
   * run at a scrape when its last answer is older than DEPENDENCY_MAX_AGE_MS; past PROBE_TIMEOUT_MS it reads as down.
   */
  dependency(name: string, probe: () => boolean | Promise<boolean>): void;
  /** The Prometheus text format of every metric (openapi.yaml, GET /metrics). */
  exposition(): Promise<string>;
}

declare module 'fastify' {
  interface FastifyInstance {
    metrics: Metrics;
  }
}

/** The buckets of the request histogram, in seconds (OpenTelemetry's HTTP semantic conventions). */
const REQUEST_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10];
/** A dependency's state may be this old at a scrape (openapi.yaml, GET /metrics). */
const DEPENDENCY_MAX_AGE_MS = 3_000;
const PROBE_TIMEOUT_MS = 2_000;
/** Methods of RFC 9110 and PATCH; any other method a client sends is counted as `_OTHER`, as OpenTelemetry does. */
const KNOWN_METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'TRACE', 'CONNECT']);

/** `prom-client`'s content type of the text format: `text/plain; version=0.0.4; charset=utf-8`. */
export const EXPOSITION_CONTENT_TYPE = Registry.PROMETHEUS_CONTENT_TYPE;

let processMetrics: Registry | undefined;

/** Node's process metrics (`process_*`, `nodejs_*`, event-loop lag): one set per process, made on first need. */
function processRegistry(): Registry {
  if (!processMetrics) {
    processMetrics = new Registry();
    collectDefaultMetrics({ register: processMetrics });
  }
  return processMetrics;
}

interface DependencyState {
  probe: () => boolean | Promise<boolean>;
  up: boolean;
  checkedAt: number;
  checking: Promise<void> | null;
}

/** Whether `probe` said yes within PROBE_TIMEOUT_MS; a failure or no answer is a no. */
async function answers(probe: () => boolean | Promise<boolean>): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), PROBE_TIMEOUT_MS);
  });
  try {
    return await Promise.race([Promise.resolve().then(probe), timeout]);
  } catch {
    return false;
  } finally {
    clearTimeout(timer);
  }
}

/** `contacts_dependency_up`: each registered dependency, probed again at a scrape once its state is DEPENDENCY_MAX_AGE_MS old. */
function dependencyGauge(registry: Registry): (name: string, probe: DependencyState['probe']) => void {
  const dependencies = new Map<string, DependencyState>();
  const refresh = (state: DependencyState) => {
    state.checking ??= answers(state.probe).then((up) => {
      Object.assign(state, { up, checkedAt: Date.now(), checking: null });
    });
    return state.checking;
  };
  new Gauge({
    name: 'contacts_dependency_up',
    help: 'Whether a dependency answers, as the service sees it (1) or not (0); at most 3 s old.',
    labelNames: ['dependency'],
    registers: [registry],
    async collect() {
      const stale = [...dependencies.values()].filter((state) => Date.now() - state.checkedAt >= DEPENDENCY_MAX_AGE_MS);
      await Promise.all(stale.map(refresh));
      for (const [dependency, state] of dependencies) this.set({ dependency }, state.up ? 1 : 0);
    },
  });
  return (name, probe) => void dependencies.set(name, { probe, up: false, checkedAt: -Infinity, checking: null });
}

/**
 * `http_server_request_duration_seconds`, recorded once per answered request when its route is
 * known (onResponse), by the route template the http plugin puts in each route's config. Each method, route and status keeps its prom-client child, so a request
 * builds no label object.
 */
function requestDuration(registry: Registry): (request: FastifyRequest, status: number, seconds: number) => void {
  const histogram = new Histogram({
    name: 'http_server_request_duration_seconds',
    help: 'Duration of HTTP server requests, from their arrival to the last byte of the answer.',
    labelNames: ['http_request_method', 'http_route', 'http_response_status_code'],
    buckets: REQUEST_BUCKETS,
    registers: [registry],
  });
  const series = new Map<string, Histogram.Internal<string>>();
  return (request, status, seconds) => {
    const method = KNOWN_METHODS.has(request.method) ? request.method : '_OTHER';
    const route = request.routeOptions.config.httpRoute ?? '';
    const key = `${method} ${status} ${route}`;
    let child = series.get(key);
    if (!child) {
      child = histogram.labels(method, route, String(status));
      series.set(key, child);
    }
    child.observe(seconds);
  };
}

/**
 * `app.metrics`: one prom-client registry per app. Each plugin registers what it owns (the cache
 * its lookups, the database its pool, …); this plugin records the request histogram and keeps the
 * dependency gauge. With METRICS_ENABLED=false neither the request histogram nor Node's process
 * metrics are recorded, and /metrics is 404 (the plugins' counters still count, unseen).
 */
export default fp(
  async (app) => {
    const registry = new Registry();
    const counters = new Map<string, Counter<string>>();
    const dependency = dependencyGauge(registry);

    app.decorate('metrics', {
      registry,
      counter<L extends string>(spec: CounterSpec<L>): Counter<L> {
        let counter = counters.get(spec.name) as Counter<L> | undefined;
        if (!counter) {
          counter = new Counter({ name: spec.name, help: spec.help, labelNames: spec.labelNames, registers: [registry] });
          for (const labels of spec.series) counter.inc(labels, 0);
          counters.set(spec.name, counter);
        }
        return counter;
      },
      dependency,
      async exposition() {
        return Registry.merge([processRegistry(), registry]).metrics();
      },
    } satisfies Metrics);

    if (!app.config.metricsEnabled) return;
    processRegistry();
    const record = requestDuration(registry);
    app.addHook('onResponse', (request, reply, done) => {
      record(request, reply.statusCode, reply.elapsedTime / 1000);
      done();
    });
  },
  { name: 'metrics', dependencies: ['config'], fastify: '5.x' },
);
