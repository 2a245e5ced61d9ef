/**
 * A Redis Cluster of private redis-server processes on free ports (nothing shared with the machine's
 * Redis), for test/scale/redis-cluster.test.ts and `npm run bench -- --redis-cluster`: `masters`
 * masters with `replicas` replicas each, joined by `redis-cli --cluster create`. Each node has its
 * own cluster bus port (port + 10000, Redis' default, may be taken). No persistence.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';

const run = promisify(execFile);

export interface ClusterNode {
  port: number;
  pid: number;
  url: string;
  /** SIGKILL: no goodbye to clients or to the other nodes. Resolves once the process is gone. */
  kill(): Promise<void>;
  /** SIGSTOP or SIGCONT: the node hangs, or goes on. */
  pause(paused: boolean): void;
  alive(): boolean;
}

export interface RedisClusterProcesses {
  /** In the order given to `redis-cli --cluster create`: the masters first. */
  nodes: ClusterNode[];
  /** Every node's URL, as REDIS_CLUSTER_URLS takes them (masters first). */
  urls: string[];
  /** The node that serves `key`'s slot as master now, as a live node sees it. */
  masterOf(key: string): Promise<ClusterNode>;
  /** The replica of `master` (ROLE on each live node). */
  replicaOf(master: ClusterNode): Promise<ClusterNode>;
  /** Resolves once every live node says `cluster_state:ok` and names the same live master for every slot range. */
  waitUntilOk(timeoutMs?: number): Promise<void>;
  /** A command on one live node (CLUSTER KEYSLOT, PUBSUB NUMSUB, ...). */
  call(node: ClusterNode, ...args: string[]): Promise<unknown>;
  /** Kills every node and removes their folder. */
  stop(): Promise<void>;
}

export interface ClusterOptions {
  masters?: number;
  replicas?: number;
  /** cluster-node-timeout: a master unreachable this long is failed over by its replica. */
  nodeTimeoutMs?: number;
}

/** `count` distinct TCP ports on 127.0.0.1 that nothing listens on right now. */
async function freePorts(count: number): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < count) {
    const server = createServer().listen(0, '127.0.0.1');
    await once(server, 'listening');
    ports.add((server.address() as { port: number }).port);
    server.close();
    await once(server, 'close');
  }
  return [...ports];
}

/** The reply of one command on a short-lived connection to `port`; rejects when the node does not answer. */
async function ask(port: number, ...args: string[]): Promise<unknown> {
  const client = new Redis({ port, host: '127.0.0.1', lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 });
  client.on('error', () => undefined);
  try {
    await client.connect();
    return await client.call(args[0]!, ...args.slice(1));
  } finally {
    client.disconnect();
  }
}

/** CLUSTER SLOTS as "start-end:masterPort" ranges, sorted: what two nodes must agree on. */
async function slotMap(port: number): Promise<string> {
  const slots = (await ask(port, 'CLUSTER', 'SLOTS')) as [number, number, [string, number]][];
  return slots
    .map(([start, end, [, masterPort]]) => `${start}-${end}:${masterPort}`)
    .sort()
    .join(' ');
}

export async function startRedisCluster({
  masters = 3,
  replicas = 1,
  nodeTimeoutMs = 1_000,
}: ClusterOptions = {}): Promise<RedisClusterProcesses> {
  const count = masters * (1 + replicas);
  const dir = await mkdtemp(path.join(tmpdir(), 'contacts-redis-cluster-'));
  const ports = await freePorts(2 * count);
  const processes: ChildProcess[] = [];
  const alive = (child: ChildProcess) => child.exitCode === null && child.signalCode === null;
  const stop = async () => {
    await Promise.all(
      processes.filter(alive).map(async (child) => {
        child.kill('SIGKILL');
        await once(child, 'exit');
      }),
    );
    await rm(dir, { recursive: true, force: true });
  };
  try {
    const nodes: ClusterNode[] = Array.from({ length: count }, (_, i) => {
      const [port, busPort] = [ports[2 * i]!, ports[2 * i + 1]!];
      const child = spawn(
        'redis-server',
        [
          ...['--port', String(port), '--cluster-port', String(busPort), '--bind', '127.0.0.1', '--dir', dir],
          ...['--cluster-enabled', 'yes', '--cluster-config-file', `nodes-${port}.conf`, '--cluster-node-timeout', String(nodeTimeoutMs)],
          // A replica fails over however long it has been apart from its master: the test machine may be slow.
          ...['--cluster-replica-validity-factor', '0', '--save', '', '--appendonly', 'no'],
        ],
        { stdio: 'ignore' },
      );
      processes.push(child);
      return {
        port,
        pid: child.pid!,
        url: `redis://127.0.0.1:${port}`,
        alive: () => alive(child),
        pause: (paused) => void child.kill(paused ? 'SIGSTOP' : 'SIGCONT'),
        kill: async () => {
          if (!alive(child)) return;
          child.kill('SIGKILL');
          await once(child, 'exit');
        },
      };
    });
    for (const node of nodes) {
      for (
        let attempt = 0;
        !(await ask(node.port, 'PING').then(
          () => true,
          () => false,
        ));
        attempt++
      ) {
        if (attempt === 100 || !node.alive()) throw new Error(`redis-server on ${node.port} did not start`);
        await sleep(50);
      }
    }
    const addresses = nodes.map((node) => `127.0.0.1:${node.port}`);
    await run('redis-cli', ['--cluster', 'create', ...addresses, '--cluster-replicas', String(replicas), '--cluster-yes'], {
      timeout: 60_000,
    });

    const live = () => nodes.filter((node) => node.alive());
    const waitUntilOk = async (timeoutMs = 30_000) => {
      for (const deadline = Date.now() + timeoutMs; ; await sleep(100)) {
        const views = await Promise.all(
          live().map(async (node) => {
            const info = String(await ask(node.port, 'CLUSTER', 'INFO').catch(() => ''));
            return /^cluster_state:ok\r?$/m.test(info) ? await slotMap(node.port).catch(() => null) : null;
          }),
        );
        const livePorts = new Set(live().map((node) => String(node.port)));
        const served = (view: string) => view.split(' ').every((range) => livePorts.has(range.split(':')[1]!));
        if (views.every((view) => view !== null && view === views[0] && served(view))) return;
        if (Date.now() > deadline) throw new Error(`the cluster is not ok after ${timeoutMs} ms: ${JSON.stringify(views)}`);
      }
    };
    await waitUntilOk();
    const anyLive = () => {
      const node = live()[0];
      if (!node) throw new Error('no redis-server of the cluster is running');
      return node;
    };
    return {
      nodes,
      urls: nodes.map((node) => node.url),
      async masterOf(key) {
        const port = anyLive().port;
        const slot = Number(await ask(port, 'CLUSTER', 'KEYSLOT', key));
        const slots = (await ask(port, 'CLUSTER', 'SLOTS')) as [number, number, [string, number]][];
        const masterPort = slots.find(([start, end]) => slot >= start && slot <= end)?.[2][1];
        const master = nodes.find((node) => node.port === masterPort);
        if (!master) throw new Error(`no master serves slot ${slot}`);
        return master;
      },
      async replicaOf(master) {
        for (const node of live()) {
          const role = (await ask(node.port, 'ROLE')) as [string, string, number];
          if (role[0] === 'slave' && role[2] === master.port) return node;
        }
        throw new Error(`${master.port} has no replica`);
      },
      waitUntilOk,
      call: (node, ...args) => ask(node.port, ...args),
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}
