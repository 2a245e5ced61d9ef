/**
 * A highly available PostgreSQL of its own, as deploy/ha/ runs one: etcd, two Patroni-managed
 * PostgreSQL nodes with `synchronous_mode` on, and HAProxy routing to whichever node Patroni's REST
 * API names the leader, all on free ports inside one temporary folder. Patroni runs as the
 * `postgres` user when run as root (initdb refuses root). Everything is killed at teardown by its
 * working directory: Patroni starts PostgreSQL in a session of its own and every backend calls
 * setsid, so neither process groups nor parents find them once a postmaster is dead.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, readdirSync, readlinkSync } from 'node:fs';
import { chown, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { freePort } from '../helper.js';
import { postgresBinDir } from './processes.js';

const TOOLS = ['patroni', 'etcd', 'haproxy'];

function onPath(tool: string): boolean {
  return (process.env.PATH ?? '').split(':').some((dir) => dir && existsSync(path.join(dir, tool)));
}

/** Why the HA stack cannot run here (the tools it needs are missing), or false when it can. */
export function haStackUnavailable(): string | false {
  const missing = TOOLS.filter((tool) => !onPath(tool));
  if (missing.length > 0) return `${missing.join(', ')} not installed (Debian: apt-get install patroni etcd-server etcd-client haproxy)`;
  if (!postgresBinDir()) return 'no PostgreSQL server binaries on this machine';
  return false;
}

export interface HaNode {
  name: string;
  /** PostgreSQL's port. */
  port: number;
  /** Patroni's REST API port. */
  apiPort: number;
  /** The node's folder: Patroni's working directory, with PostgreSQL's data directory inside. */
  dir: string;
}

export interface HaCluster {
  /** `postgres://…/contacts` through HAProxy: always the leader, whichever node that is. */
  url: string;
  nodes: HaNode[];
  /** The node whose Patroni holds the leader lock, once one does. */
  leader(timeoutMs?: number): Promise<HaNode>;
  /** Resolves once a leader and a streaming synchronous standby are both in place. */
  waitForSyncStandby(timeoutMs?: number): Promise<void>;
  /**
   * SIGKILL to the node's Patroni and every PostgreSQL process of it; resolves once none is left,
   * with how many there were and when the first signals were sent (a scan of /proc takes a while).
   */
  kill(node: HaNode): Promise<{ processes: number; at: number }>;
  /** Resolves once a write through HAProxy commits (a leader promoted and routed to). */
  waitForWritable(timeoutMs?: number): Promise<void>;
  /** Ends every process of the cluster and removes its folder. */
  destroy(): Promise<void>;
}

/** Processes whose working directory is `dir` or inside it. */
function processesIn(dir: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const cwd = readlinkSync(`/proc/${entry}/cwd`);
      if (cwd === dir || cwd.startsWith(`${dir}/`)) pids.push(Number(entry));
    } catch {
      // Gone meanwhile, or not ours to read.
    }
  }
  return pids;
}

function killAll(pids: number[]): void {
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // Already gone.
    }
  }
}

async function json(url: string): Promise<{ status: number; body: Record<string, unknown> | null }> {
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(2_000) });
    const text = await response.text();
    return { status: response.status, body: text.startsWith('{') ? (JSON.parse(text) as Record<string, unknown>) : null };
  } catch {
    return { status: 0, body: null };
  }
}

/** HAProxy's view of its servers (`show stat` on its admin socket): name → UP, DOWN, … */
async function haproxyStatus(socket: string): Promise<Record<string, string>> {
  const text = await new Promise<string>((resolve) => {
    let out = '';
    const conn = connect(socket, () => conn.end('show stat\n'));
    conn.setEncoding('utf8');
    conn.on('data', (chunk: string) => (out += chunk));
    conn.on('close', () => resolve(out));
    conn.on('error', () => resolve(''));
  });
  const status: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const fields = line.split(',');
    if (fields[0] === 'postgres' && fields[1] !== 'FRONTEND' && fields[1] !== 'BACKEND' && fields[1]) status[fields[1]] = fields[17] ?? '';
  }
  return status;
}

function patroniConfig(cluster: { etcdPort: number; binDir: string }, node: HaNode): string {
  // Patroni's timing rule: loop_wait + 2 × retry_timeout ≤ ttl.
  return `scope: contacts-ha
name: ${node.name}
log:
  level: WARNING
restapi:
  listen: 127.0.0.1:${node.apiPort}
  connect_address: 127.0.0.1:${node.apiPort}
etcd3:
  hosts: 127.0.0.1:${cluster.etcdPort}
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 2
    retry_timeout: 4
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    postgresql:
      use_pg_rewind: false
      use_slots: true
      parameters:
        wal_level: replica
        hot_standby: 'on'
        max_wal_senders: 5
        max_replication_slots: 5
        wal_keep_size: 64MB
        fsync: 'off'
  initdb:
    - encoding: UTF8
    - auth: trust
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:${node.port}
  connect_address: 127.0.0.1:${node.port}
  data_dir: ${node.dir}/data
  bin_dir: ${cluster.binDir}
  pgpass: ${node.dir}/pgpass
  authentication:
    superuser:
      username: postgres
    replication:
      username: postgres
  parameters:
    unix_socket_directories: ${node.dir}
  basebackup:
    - checkpoint: fast
`;
}

function haproxyConfig(port: number, socket: string, nodes: HaNode[]): string {
  // Patroni's /primary answers 200 on the leader only. HAProxy counts every server UP until its
  // first checks, so the caller waits for the checks to settle before sending anything.
  return `global
  stats socket ${socket} mode 600 level admin
defaults
  mode tcp
  timeout connect 2s
  timeout client 10m
  timeout server 10m
  timeout check 1s
listen postgres
  bind 127.0.0.1:${port}
  option httpchk
  http-check send meth GET uri /primary
  http-check expect status 200
  default-server inter 500ms fastinter 250ms downinter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
${nodes.map((n) => `  server ${n.name} 127.0.0.1:${n.port} check port ${n.apiPort}`).join('\n')}
`;
}

/**
 * Starts the stack and resolves once HAProxy routes to a leader that has a synchronous standby,
 * with a `contacts` database on it.
 */
export async function startHaCluster(): Promise<HaCluster> {
  const binDir = postgresBinDir();
  if (!binDir) throw new Error('no PostgreSQL server binaries');
  const root = await mkdtemp(path.join(tmpdir(), 'contacts-ha-'));
  const children: ChildProcess[] = [];
  const logs = new Map<string, string>();
  const started = (name: string, child: ChildProcess) => {
    children.push(child);
    logs.set(name, '');
    const keep = (chunk: Buffer) => logs.set(name, (logs.get(name)! + chunk.toString()).slice(-20_000));
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
    return child;
  };
  const destroy = async () => {
    for (let round = 0; round < 5; round++) {
      const pids = processesIn(root);
      if (pids.length === 0) break;
      killAll(pids);
      await sleep(100);
    }
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await rm(root, { recursive: true, force: true });
  };
  try {
    const asRoot = process.getuid?.() === 0;
    const owner = asRoot
      ? { uid: Number(execFileSync('id', ['-u', 'postgres']).toString()), gid: Number(execFileSync('id', ['-g', 'postgres']).toString()) }
      : null;
    const temp = path.join(root, 'tmp');
    // initdb writes a password file under TMPDIR.
    const env = { ...process.env, TMPDIR: temp, PGTZ: 'UTC' };
    for (const dir of [root, temp]) {
      await mkdir(dir, { recursive: true });
      if (owner) await chown(dir, owner.uid, owner.gid);
    }

    const etcdPort = await freePort();
    const etcdPeerPort = await freePort();
    const etcdDir = path.join(root, 'etcd');
    await mkdir(etcdDir);
    const etcdUrl = `http://127.0.0.1:${etcdPort}`;
    const peerUrl = `http://127.0.0.1:${etcdPeerPort}`;
    started(
      'etcd',
      spawn(
        'etcd',
        [
          '--name=etcd0',
          `--data-dir=${etcdDir}/data`,
          `--listen-client-urls=${etcdUrl}`,
          `--advertise-client-urls=${etcdUrl}`,
          `--listen-peer-urls=${peerUrl}`,
          `--initial-advertise-peer-urls=${peerUrl}`,
          `--initial-cluster=etcd0=${peerUrl}`,
          '--log-level=error',
        ],
        { cwd: etcdDir, env, stdio: ['ignore', 'pipe', 'pipe'] },
      ),
    );
    for (let i = 0; ; i++) {
      if ((await json(`${etcdUrl}/health`)).status === 200) break;
      if (i > 200) throw new Error(`etcd did not start: ${logs.get('etcd')}`);
      await sleep(50);
    }

    const nodes: HaNode[] = [];
    for (const name of ['node1', 'node2']) {
      const node = { name, port: await freePort(), apiPort: await freePort(), dir: path.join(root, name) };
      await mkdir(node.dir, { mode: 0o700 });
      if (owner) await chown(node.dir, owner.uid, owner.gid);
      const config = path.join(node.dir, 'patroni.yml');
      await writeFile(config, patroniConfig({ etcdPort, binDir }, node));
      if (owner) await chown(config, owner.uid, owner.gid);
      nodes.push(node);
    }
    const startPatroni = (node: HaNode) =>
      started(
        node.name,
        spawn(
          asRoot ? 'runuser' : 'patroni',
          asRoot ? ['-u', 'postgres', '--', 'patroni', path.join(node.dir, 'patroni.yml')] : [path.join(node.dir, 'patroni.yml')],
          { cwd: node.dir, env, stdio: ['ignore', 'pipe', 'pipe'] },
        ),
      );
    // The first node bootstraps alone (two racing for the initialize key would both run initdb).
    startPatroni(nodes[0]!);

    const leader = async (timeoutMs = 60_000): Promise<HaNode> => {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        for (const node of nodes) {
          if ((await json(`http://127.0.0.1:${node.apiPort}/primary`)).status === 200) return node;
        }
        if (Date.now() > deadline) throw new Error(`no leader: ${[...logs].map(([n, l]) => `${n}: ${l.slice(-1500)}`).join('\n')}`);
        await sleep(200);
      }
    };
    await leader();
    startPatroni(nodes[1]!);

    const waitForSyncStandby = async (timeoutMs = 90_000) => {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        for (const node of nodes) {
          const { body } = await json(`http://127.0.0.1:${node.apiPort}/cluster`);
          const members = (body?.members ?? []) as { role?: string; state?: string }[];
          if (members.some((m) => m.role === 'sync_standby' && (m.state === 'streaming' || m.state === 'running'))) return;
        }
        if (Date.now() > deadline)
          throw new Error(`no synchronous standby: ${[...logs].map(([n, l]) => `${n}: ${l.slice(-1500)}`).join('\n')}`);
        await sleep(250);
      }
    };
    await waitForSyncStandby();

    const haproxyDir = path.join(root, 'haproxy');
    await mkdir(haproxyDir);
    const haproxyPort = await freePort();
    const socket = path.join(haproxyDir, 'admin.sock');
    const haproxyFile = path.join(haproxyDir, 'haproxy.cfg');
    await writeFile(haproxyFile, haproxyConfig(haproxyPort, socket, nodes));
    started('haproxy', spawn('haproxy', ['-db', '-f', haproxyFile], { cwd: haproxyDir, env, stdio: ['ignore', 'pipe', 'pipe'] }));
    // Settled: the leader UP and the standby DOWN, by checks rather than by HAProxy's initial guess.
    const current = await leader();
    for (let i = 0; ; i++) {
      const status = existsSync(socket) ? await haproxyStatus(socket) : {};
      const settled = nodes.every((n) => (status[n.name] ?? '').startsWith(n === current ? 'UP' : 'DOWN'));
      if (settled) break;
      if (i > 200) throw new Error(`HAProxy did not settle: ${JSON.stringify(status)} ${logs.get('haproxy')}`);
      await sleep(100);
    }

    const adminUrl = `postgres://postgres@127.0.0.1:${haproxyPort}/postgres`;
    const admin = new pg.Client({ connectionString: adminUrl });
    await admin.connect();
    await admin.query('create database contacts');
    await admin.end();

    const waitForWritable = async (timeoutMs = 60_000) => {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const client = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: 2_000 });
        client.on('error', () => undefined);
        const ok = await client
          .connect()
          .then(() => client.query('create temporary table probe (x int)'))
          .then(
            () => true,
            () => false,
          );
        await client.end().catch(() => undefined);
        if (ok) return;
        if (Date.now() > deadline) throw new Error('no writable leader');
        await sleep(100);
      }
    };

    return {
      url: `postgres://postgres@127.0.0.1:${haproxyPort}/contacts`,
      nodes,
      leader,
      waitForSyncStandby,
      kill: async (node) => {
        let pids = processesIn(node.dir);
        killAll(pids);
        const at = Date.now();
        let processes = pids.length;
        // Again until none is left: the postmaster can fork a backend between a scan and its kill.
        for (pids = processesIn(node.dir); pids.length > 0; pids = processesIn(node.dir)) {
          killAll(pids);
          processes += pids.length;
          await sleep(20);
        }
        return { processes, at };
      },
      waitForWritable,
      destroy,
    };
  } catch (error) {
    await destroy();
    throw error;
  }
}
