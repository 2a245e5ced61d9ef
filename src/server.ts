/** Process entry: build the app, listen, and close gracefully on SIGTERM/SIGINT. */
import { ConfigError, loadConfig } from '../plugins/config.js';
import { buildApp } from './app.js';

let config;
try {
  config = await loadConfig();
} catch (error) {
  if (!(error instanceof ConfigError)) throw error;
  console.error(`Configuration error: ${error.message}`);
  process.exit(1);
}

const app = await buildApp({ config });
if (config.nodeEnv === 'production' && !config.redisUrl) {
  app.log.warn('REDIS_URL is not set: rate-limit counters and the cache are per instance, not shared');
}
let shuttingDown = false;
// Answers given while shutting down close their connection: an idle keep-alive connection would
// otherwise hold the close up for the whole keep-alive timeout.
app.addHook('onSend', async (_request, reply, payload) => {
  if (shuttingDown) reply.header('connection', 'close');
  return payload;
});
await app.listen({ host: config.host, port: config.port });
app.log.info(`Docs at ${config.publicBaseUrl}/docs`);

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.once(signal, () => {
    shuttingDown = true;
    app.log.info({ signal }, 'closing: finishing requests in flight');
    // close() stops accepting connections, lets requests in flight finish, then runs onClose hooks.
    app.close().then(
      () => process.exit(0),
      (error: unknown) => {
        app.log.error({ err: error }, 'error while closing');
        process.exit(1);
      },
    );
  });
}
