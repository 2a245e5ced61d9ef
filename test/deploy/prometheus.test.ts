/**
 * What deploy/ ships, checked with the real tools (Debian's `prometheus` package; .ci/run installs
 * it): `promtool check config` on the scrape config, `promtool test rules` on the alerts' unit
 * tests, and a real Prometheus scraping a running service with the shipped job (bearer token and
 * all): a counter read back through its HTTP query API equals the traffic sent, the alerts load,
 * and every query of the Grafana dashboard is valid PromQL over metrics the service exposes.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { parse, stringify } from 'yaml';
import { build, freePort } from '../helper.js';
import { parseExposition } from '../plugins/exposition.js';

const DEPLOY = path.resolve('deploy');
const missing = spawnSync('prometheus', ['--version']).error !== undefined || spawnSync('promtool', ['--version']).error !== undefined;
/** CI installs Prometheus (.ci/run), so there a missing binary fails instead of skipping. */
const skip = missing && !process.env.CI && 'Prometheus is not installed (apt-get install prometheus)';

interface Dashboard {
  panels: { title: string; datasource?: { uid: string }; targets?: { expr: string; datasource?: { uid: string } }[] }[];
  templating: { list: { definition: string }[] };
}

/** The dashboard's and the alerts' PromQL, with Grafana's variables given the values a first load has. */
async function shippedQueries(): Promise<{ dashboard: Dashboard; queries: { where: string; expr: string }[] }> {
  const dashboard = JSON.parse(await readFile(path.join(DEPLOY, 'grafana/dashboards/contacts.json'), 'utf8')) as Dashboard;
  type Alerts = { groups: { rules: { alert: string; expr: string }[] }[] };
  const alerts = parse(await readFile(path.join(DEPLOY, 'prometheus/alerts.yml'), 'utf8')) as Alerts;
  const grafana = (expr: string) => expr.replaceAll('$__rate_interval', '1m').replaceAll('$instance', '.*');
  return {
    dashboard,
    queries: [
      ...dashboard.panels.flatMap((panel) =>
        (panel.targets ?? []).map((target) => ({ where: `panel "${panel.title}"`, expr: grafana(target.expr) })),
      ),
      ...dashboard.templating.list.map((variable) => ({
        where: 'variable',
        expr: /label_values\((.*), \w+\)/.exec(variable.definition)![1]!,
      })),
      ...alerts.groups.flatMap((group) => group.rules.map((rule) => ({ where: `alert ${rule.alert}`, expr: rule.expr }))),
    ],
  };
}

t.test("promtool checks the scrape config and runs the alerts' unit tests", { skip }, async (t) => {
  // The config as shipped, beside the token file the deployment writes.
  const dir = await mkdtemp(path.join(tmpdir(), 'contacts-promtool-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  await cp(path.join(DEPLOY, 'prometheus'), dir, { recursive: true });
  await writeFile(path.join(dir, 'metrics-token'), randomBytes(24).toString('hex'));
  const config = spawnSync('promtool', ['check', 'config', path.join(dir, 'prometheus.yml')], { encoding: 'utf8' });
  t.equal(config.status, 0, `promtool check config: ${config.stdout}${config.stderr}`);
  const rules = spawnSync('promtool', ['test', 'rules', path.join(DEPLOY, 'prometheus/alerts.test.yml')], { encoding: 'utf8' });
  t.equal(rules.status, 0, `promtool test rules: ${rules.stdout}${rules.stderr}`);
  type RuleTests = { tests: { alert_rule_test: { alertname: string; exp_alerts: unknown[] }[] }[] };
  const tested = parse(await readFile(path.join(DEPLOY, 'prometheus/alerts.test.yml'), 'utf8')) as RuleTests;
  const checks = tested.tests.flatMap((test) => test.alert_rule_test);
  const fired = new Set(checks.filter((check) => check.exp_alerts.length > 0).map((check) => check.alertname));
  const { queries } = await shippedQueries();
  const alerts = queries.filter((query) => query.where.startsWith('alert ')).map((query) => query.where.slice('alert '.length));
  t.same([...fired].sort(), [...alerts].sort(), 'each alert has a unit test in which it fires');
});

t.test('a real Prometheus scrapes a running service with the shipped job', { skip }, async (t) => {
  const token = randomBytes(24).toString('base64url');
  const app = await build(t, { env: { METRICS_TOKEN: token } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const target = `127.0.0.1:${(app.server.address() as AddressInfo).port}`;

  const dir = await mkdtemp(path.join(tmpdir(), 'contacts-prometheus-'));
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  await cp(path.join(DEPLOY, 'prometheus'), dir, { recursive: true });
  await writeFile(path.join(dir, 'metrics-token'), token);
  // The shipped job, pointed at this service instead of the Compose replicas, and scraping every second.
  type Config = { global: Record<string, string>; scrape_configs: Record<string, unknown>[] };
  const config = parse(await readFile(path.join(dir, 'prometheus.yml'), 'utf8')) as Config;
  config.global = { scrape_interval: '1s', evaluation_interval: '1s' };
  const [job] = config.scrape_configs;
  delete job!.dns_sd_configs;
  job!.static_configs = [{ targets: [target] }];
  await writeFile(path.join(dir, 'prometheus.yml'), stringify(config));

  const port = await freePort();
  const prometheus: ChildProcess = spawn(
    'prometheus',
    [
      `--config.file=${path.join(dir, 'prometheus.yml')}`,
      `--storage.tsdb.path=${path.join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--log.level=warn',
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let log = '';
  prometheus.stderr!.setEncoding('utf8').on('data', (chunk: string) => (log += chunk));
  t.teardown(async () => {
    if (prometheus.exitCode !== null || prometheus.signalCode !== null) return;
    prometheus.kill('SIGTERM');
    await once(prometheus, 'exit');
  });
  const api = `http://127.0.0.1:${port}`;
  const query = async (expr: string) => {
    const res = await fetch(`${api}/api/v1/query?${new URLSearchParams({ query: expr })}`);
    type Answer = { status: string; error?: string; data: { result: { metric: Record<string, string>; value: [number, string] }[] } };
    return (await res.json()) as Answer;
  };
  const until = async <T>(what: string, probe: () => Promise<T | undefined>): Promise<T> => {
    for (let waited = 0; waited < 30_000; waited += 200) {
      const found = await probe().catch(() => undefined);
      if (found !== undefined) return found;
      if (prometheus.exitCode !== null) throw new Error(`prometheus exited: ${log}`);
      await sleep(200);
    }
    throw new Error(`${what} did not happen within 30 s: ${log}`);
  };
  await until('Prometheus ready', async () => ((await fetch(`${api}/-/ready`)).ok ? true : undefined));

  const probes = 7;
  for (let i = 0; i < probes; i++) t.equal((await app.inject({ method: 'GET', url: '/readyz' })).statusCode, 200);
  const selector = 'http_server_request_duration_seconds_count{job="contacts", http_route="/readyz", http_response_status_code="200"}';
  const counted = await until(`a scrape with ${probes} /readyz answers`, async () => {
    const value = (await query(selector)).data.result[0]?.value[1];
    return value === String(probes) ? value : undefined;
  });
  t.equal(counted, String(probes), 'the counter read back through the query API is the traffic sent');
  t.same(
    (await query('up{job="contacts"}')).data.result.map((series) => series.value[1]),
    ['1'],
    'the target is up: the bearer token was accepted',
  );

  type Rules = { data: { groups: { rules: { name: string; health: string; type: string }[] }[] } };
  const rules = (await (await fetch(`${api}/api/v1/rules`)).json()) as Rules;
  const loaded = rules.data.groups.flatMap((group) => group.rules);
  t.same(
    loaded.map((rule) => [rule.name, rule.type, rule.health]).sort(),
    [
      ['ContactsDependencyDown', 'alerting', 'ok'],
      ['ContactsHighErrorRatio', 'alerting', 'ok'],
      ['ContactsPasswordQueueFilling', 'alerting', 'ok'],
      ['ContactsSlowCachedReads', 'alerting', 'ok'],
    ],
    'the alerts load and evaluate',
  );

  const { dashboard, queries } = await shippedQueries();
  const exposed = new Set(['up', ...parseExposition(await app.metrics.exposition()).map((sample) => sample.name)]);
  for (const { where, expr } of queries) {
    const answer = await query(expr);
    t.equal(answer.status, 'success', `${where}: ${answer.error ?? 'valid PromQL'}`);
    const unknown = [...expr.matchAll(/([a-zA-Z_:][a-zA-Z0-9_:]*)\{/g)].map((match) => match[1]!).filter((name) => !exposed.has(name));
    t.same(unknown, [], `${where}: every metric it reads is exposed`);
  }
  const provisioned = await readFile(path.join(DEPLOY, 'grafana/provisioning/datasources/prometheus.yml'), 'utf8');
  const datasources = parse(provisioned) as { datasources: { uid: string }[] };
  const uids = new Set(
    dashboard.panels.flatMap((panel) => [panel.datasource?.uid, ...(panel.targets ?? []).map((target) => target.datasource?.uid)]),
  );
  t.same(
    [...uids].filter((uid) => uid !== undefined),
    [datasources.datasources[0]!.uid],
    'the dashboard reads the provisioned data source',
  );
});
