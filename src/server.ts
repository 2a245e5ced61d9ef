/** Process entry: build the app, listen, and close gracefully on a signal or a fatal error, within a deadline. */
import closeWithGrace from 'close-with-grace';
import { ConfigError, loadConfig } from '../plugins/config.js';
import { buildApp } from './app.js';

/** Start-up failures are one line with a hint, and the process exits 1 with nothing left running. */
function startupFailed(message: string): never {
  console.error(`Start-up failed: ${message}`);
  process.exit(1);
}

// Whatever this process writes (the embedded database, the mail outbox, the development secret) is
// readable by its own user only.
process.umask(0o077);

let config;
try {
  config = await loadConfig();
} catch (error) {
  if (!(error instanceof ConfigError)) throw error;
  for (const problem of error.problems) console.error(`Configuration error: ${problem}`);
  process.exit(1);
}

// OpenTelemetry is imported only when tracing is on: off, it costs nothing.
const tracing = config.tracing ? (await import('../plugins/tracing.js')).startTracing(config.tracing, config.databaseUrl) : undefined;
const app = await buildApp({ config, tracing }).catch((error: Error) => startupFailed(error.message));
if (tracing) app.addHook('onClose', () => tracing.shutdown());
if (config.nodeEnv === 'production' && !config.redisUrl && !config.redisClusterUrls) {
  app.log.warn('Neither REDIS_URL nor REDIS_CLUSTER_URLS is set: rate-limit counters and the cache are per instance, not shared');
}
let shuttingDown = false;
// Answers given while shutting down close their connection: an idle keep-alive connection would
// otherwise hold the close up for the whole keep-alive timeout.
app.addHook('onSend', (_request, reply, payload, done) => {
  if (shuttingDown) reply.header('connection', 'close');
  done(null, payload);
});
try {
  await app.listen({ host: config.host, port: config.port });
} catch (error) {
  // Closing what did start must not hide the reason the start failed.
  await app.close().catch(() => undefined);
  const code = (error as NodeJS.ErrnoException).code;
  if (code === 'EADDRINUSE') startupFailed(`port ${config.port} on ${config.host} is already in use: stop the other process, or set PORT`);
  if (code === 'EADDRNOTAVAIL') startupFailed(`${config.host} is not an address of this machine: fix HOST`);
  startupFailed((error as Error).message);
}
app.log.info(`Docs at ${config.publicBaseUrl}/docs`);

// On SIGTERM, SIGINT (and the other signals close-with-grace handles) or an uncaught error: close()
// stops accepting connections, lets requests in flight finish, then runs onClose hooks (database,
// password pool, Redis). A request that never finishes (a query stuck on a lock, say) must not hold
// the process forever: past SHUTDOWN_TIMEOUT_MS it exits 1, and the orchestrator restarts it.
closeWithGrace(
  {
    delay: config.shutdownTimeoutMs,
    logger: { error: (message: unknown) => app.log.error(message) },
    onTimeout: (delay) =>
      app.log.error(
        { timeoutMs: delay },
        'shutdown did not finish by the shutdown deadline (requests in flight or closing hooks); exiting with code 1',
      ),
  },
  async ({ signal, err }) => {
    shuttingDown = true;
    if (err) app.log.error({ err }, 'closing after an uncaught error');
    else app.log.info({ signal }, 'closing: finishing requests in flight');
    await app.close();
  },
);
