import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { type Kysely, sql } from 'kysely';
import { Gauge } from 'prom-client';
import { databaseOver, isDatabaseUnavailable, openPool } from './db.js';
import { type RedisClient, userTag } from './redis.js';

/**
 * Reads on streaming-replication standbys (DATABASE_READ_URLS) with read-your-writes, as
 * docs/performance.md ("Read replicas") describes: after a user's write commits, the primary's WAL
 * position is stored for the user (Redis, shared by every instance; else this process); a read of
 * that user goes to a standby only if that very standby, on the connection that then runs the read,
 * has replayed past it. Anything else (no standby in rotation, none caught up, a standby failing,
 * the positions unknown) reads on the primary, so a standby never fails a read.
 */

/** How long a user's write position is kept: longer than a standby in rotation can lag (MAX_LAG_MS plus a probe). */
export const POSITION_TTL_MS = 60_000;
/** A standby whose replay is further behind the primary than this is left out until it catches up. */
export const MAX_LAG_MS = 10_000;
/** Each standby's replay position (and the primary's WAL position) is sampled this often. */
const PROBE_INTERVAL_MS = 1_000;
/** A standby that could not be reached is tried again after this, doubled on each failure up to BACKOFF_MAX_MS. */
const BACKOFF_MIN_MS = 1_000;
const BACKOFF_MAX_MS = 30_000;
/** A probe or a connection that takes longer counts as a failure of the standby. */
const CONNECT_TIMEOUT_MS = 2_000;
/** Connections of each standby's pool (the primary's has 10). */
const STANDBY_POOL_SIZE = 10;

/** SQLSTATEs of a standby cancelling a read for replay (conflict with recovery): the primary answers it instead. */
const RECOVERY_CONFLICT_STATES = new Set(['40001', '40P01']);

/** A WAL position ('16/B374D848') as 16 hex digits, so that positions compare as strings (in Lua too). */
export function sortableLsn(lsn: string): string {
  const [high = '', low = ''] = lsn.split('/');
  return `${high.toUpperCase().padStart(8, '0')}${low.toUpperCase().padStart(8, '0')}`;
}

/** A sortableLsn back in PostgreSQL's form. */
const pgLsn = (sortable: string) => `${sortable.slice(0, 8)}/${sortable.slice(8)}`;

/** Users' last write positions (sortableLsn): raised, never lowered, and forgotten POSITION_TTL_MS after the last write. */
export interface WritePositions {
  /** Null when unknown for now (the store failed): the caller reads on the primary. */
  get(userId: number): Promise<string | null | undefined>;
  raise(userId: number, position: string): Promise<void>;
}

/** Sets KEYS[1] to ARGV[1] unless it holds a later position; either way it lives ARGV[2] ms more. */
const RAISE_SCRIPT = `
local held = redis.call('GET', KEYS[1])
if held and held >= ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
else
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return 1
`;

/**
 * Positions in Redis under the user's hash tag, shared by every instance. Redis may have lost
 * positions while it failed (a restart, a failover), so after any failure this process reads every
 * user on the primary until a position stored before it would have expired anyway.
 */
export function redisPositions(client: RedisClient, prefix: string, log: FastifyBaseLogger, now: () => number): WritePositions {
  if (!('raiseWritePosition' in client)) client.defineCommand('raiseWritePosition', { numberOfKeys: 1, lua: RAISE_SCRIPT });
  const redis = client as RedisClient & { raiseWritePosition(key: string, position: string, ttlMs: number): Promise<number> };
  const key = (userId: number) => `${prefix}${userTag(userId)}:wal`;
  let unknownUntil = 0;
  const failed = (error: unknown) => {
    if (unknownUntil < now()) log.warn({ err: error }, 'redis failed; reads go to the primary database for a minute');
    unknownUntil = now() + POSITION_TTL_MS;
  };
  return {
    async get(userId) {
      if (unknownUntil > now()) return null;
      try {
        return (await redis.get(key(userId))) ?? undefined;
      } catch (error) {
        failed(error);
        return null;
      }
    },
    async raise(userId, position) {
      try {
        await redis.raiseWritePosition(key(userId), position, POSITION_TTL_MS);
      } catch (error) {
        failed(error);
      }
    },
  };
}

/** Positions in this process, for one instance without Redis. */
export function memoryPositions(now: () => number): WritePositions {
  const positions = new Map<number, { position: string; until: number }>();
  return {
    async get(userId) {
      const held = positions.get(userId);
      if (held && held.until <= now()) positions.delete(userId);
      return held && held.until > now() ? held.position : undefined;
    },
    async raise(userId, position) {
      const held = positions.get(userId);
      // Re-inserted at the end, so the map stays in expiry order and the loop below stops early.
      positions.delete(userId);
      positions.set(userId, { position: held && held.position > position ? held.position : position, until: now() + POSITION_TTL_MS });
      for (const [user, { until }] of positions) {
        if (until > now()) break;
        positions.delete(user);
      }
    },
  };
}

/** One standby and what the probes last saw of it. */
interface Standby<DB> {
  name: string;
  db: Kysely<DB>;
  /** Whether reads may go to it: it answers, is still a standby, and lags at most MAX_LAG_MS. */
  serving: boolean;
  /** While it is unreachable: when the next probe may try it, and the wait after that one. */
  retryAt: number;
  backoffMs: number;
}

/** `host:port/database` of a URL, for logs: never its credentials. */
function standbyName(url: string): string {
  const parsed = new URL(url);
  return `${parsed.host}${parsed.pathname}`;
}

/**
 * Which standbys lag at most MAX_LAG_MS: the primary's WAL position is sampled at each probe, and a
 * standby that has replayed past the position the primary had MAX_LAG_MS ago is close enough.
 */
class PrimaryHistory {
  private samples: { at: number; position: string }[] = [];

  add(at: number, position: string): void {
    this.samples.push({ at, position });
    // Keep one sample at least MAX_LAG_MS old: the position every serving standby must have passed.
    while (this.samples.length > 1 && this.samples[1]!.at <= at - MAX_LAG_MS) this.samples.shift();
  }

  /** Whether a standby that replayed up to `replayed` lags at most MAX_LAG_MS (while the history is shorter: it passed the first sample). */
  closeEnough(replayed: string): boolean {
    const oldest = this.samples[0];
    return oldest !== undefined && replayed >= oldest.position;
  }
}

type Node = 'primary' | 'standby';

export interface ReadReplicas<DB> {
  /**
   * Runs `read` (statements that only read) on a standby that has replayed the user's last write,
   * on the connection it checked, else on the primary.
   */
  reading<T>(userId: number, read: (db: Kysely<DB>) => Promise<T>): Promise<T>;
  /** After a write of the user committed (before it is acknowledged): their reads must see it from now on. */
  wrote(userId: number): Promise<void>;
}

declare module 'fastify' {
  interface FastifyInstance {
    /** Reads of one user on a standby or the primary (DATABASE_READ_URLS); the write bookkeeping that keeps them fresh. */
    replicas: ReadReplicas<FastifyInstance['db'] extends Kysely<infer DB> ? DB : never>;
  }
}

const READS = {
  name: 'contacts_db_reads_total',
  help: 'Reads that may go to a standby (DATABASE_READ_URLS), by the node that ran them.',
  labelNames: ['node'],
  series: [{ node: 'primary' }, { node: 'standby' }],
} as const;

/**
 * `app.replicas`: with DATABASE_READ_URLS, a pool per standby, probed every second; without, every
 * read runs on `app.db` and a write records nothing.
 */
export default fp(
  async (app) => {
    type DB = FastifyInstance['db'] extends Kysely<infer D> ? D : never;
    const primary = app.db;
    const reads = app.metrics.counter(READS);
    const counted = (node: Node) => reads.labels(node).inc();
    const urls = app.config.databaseReadUrls;
    if (urls.length === 0) {
      app.decorate('replicas', {
        reading: (_userId, read) => (counted('primary'), read(primary)),
        wrote: async () => {},
      } satisfies ReadReplicas<DB>);
      return;
    }
    const now = () => Date.now();
    const positions = app.redisClient
      ? redisPositions(app.redisClient, `${app.config.redisKeyPrefix}replicas:`, app.log, now)
      : memoryPositions(now);
    const standbys: Standby<DB>[] = [];
    for (const url of urls) {
      const name = standbyName(url);
      const pool = await openPool(url, '', {
        connectionTimeoutMs: CONNECT_TIMEOUT_MS,
        maxConnections: STANDBY_POOL_SIZE,
        statementTimeoutMs: app.config.dbStatementTimeoutMs,
        onIdleError: (error) => app.log.warn({ err: error, standby: name }, 'an idle standby connection was closed by the server'),
      });
      standbys.push({ name, db: databaseOver<DB>(pool), serving: false, retryAt: 0, backoffMs: BACKOFF_MIN_MS });
    }
    const history = new PrimaryHistory();

    const leaveOut = (standby: Standby<DB>, reason: string, error?: unknown) => {
      if (standby.serving) app.log.warn({ err: error, standby: standby.name }, `standby left out of reads: ${reason}`);
      standby.serving = false;
    };
    const unreachable = (standby: Standby<DB>, error: unknown) => {
      leaveOut(standby, 'not reachable', error);
      standby.retryAt = now() + standby.backoffMs;
      standby.backoffMs = Math.min(BACKOFF_MAX_MS, standby.backoffMs * 2);
    };
    const withTimeout = <T>(work: Promise<T>) =>
      Promise.race([
        work,
        new Promise<never>((_, reject) => setTimeout(() => reject(new Error('probe timed out')), CONNECT_TIMEOUT_MS).unref()),
      ]);

    const probeStandby = async (standby: Standby<DB>) => {
      if (standby.retryAt > now()) return;
      let state;
      try {
        const { rows } = await withTimeout(
          sql<{
            standby: boolean;
            replayed: string | null;
          }>`select pg_is_in_recovery() as standby, pg_last_wal_replay_lsn()::text as replayed`.execute(standby.db),
        );
        state = rows[0]!;
      } catch (error) {
        return unreachable(standby, error);
      }
      standby.backoffMs = BACKOFF_MIN_MS;
      // A promoted standby no longer follows the primary: what it holds may never include a later write.
      if (!state.standby || state.replayed === null) return leaveOut(standby, 'not a standby in recovery');
      if (!history.closeEnough(sortableLsn(state.replayed))) return leaveOut(standby, `lagging more than ${MAX_LAG_MS} ms`);
      if (!standby.serving) app.log.info({ standby: standby.name }, 'standby serving reads');
      standby.serving = true;
    };
    const probe = async () => {
      try {
        const { rows } = await sql<{ position: string }>`select pg_current_wal_lsn()::text as position`.execute(primary);
        history.add(now(), sortableLsn(rows[0]!.position));
      } catch {
        // The primary is down: the standbys keep their state, and reads that reach the primary fail as they would without standbys.
        return;
      }
      await Promise.all(standbys.map(probeStandby));
    };
    await probe();
    let probing: Promise<void> | null = null;
    // A probe still waiting (a standby that does not answer) skips the next: they never pile up.
    const timer = setInterval(() => {
      probing ??= probe().finally(() => (probing = null));
    }, PROBE_INTERVAL_MS);
    timer.unref();

    let next = 0;
    /** The standbys in rotation, starting with the next in turn. */
    const rotation = () => {
      const serving = standbys.filter((standby) => standby.serving);
      next = (next + 1) % Math.max(1, serving.length);
      return [...serving.slice(next), ...serving.slice(0, next)];
    };
    const NOT_CAUGHT_UP = Symbol('not caught up');

    app.decorate('replicas', {
      async reading(userId, read) {
        const candidates = rotation();
        const position = candidates.length === 0 ? null : await positions.get(userId);
        if (position !== null) {
          for (const standby of candidates) {
            try {
              const answer = await standby.db.connection().execute(async (connection) => {
                if (position !== undefined) {
                  const { rows } = await sql<{
                    caught_up: boolean | null;
                  }>`select pg_last_wal_replay_lsn() >= ${pgLsn(position)}::pg_lsn as caught_up`.execute(connection);
                  if (!rows[0]?.caught_up) return NOT_CAUGHT_UP;
                }
                return { value: await read(connection) };
              });
              if (answer !== NOT_CAUGHT_UP) {
                counted('standby');
                return answer.value;
              }
            } catch (error) {
              if (isDatabaseUnavailable(error)) unreachable(standby, error);
              else if (!RECOVERY_CONFLICT_STATES.has((error as { code?: unknown }).code as string)) throw error;
            }
          }
        }
        counted('primary');
        return read(primary);
      },
      async wrote(userId) {
        const { rows } = await sql<{ position: string }>`select pg_current_wal_lsn()::text as position`.execute(primary);
        await positions.raise(userId, sortableLsn(rows[0]!.position));
      },
    } satisfies ReadReplicas<DB>);

    new Gauge({
      name: 'contacts_db_standbys',
      help: 'Standbys of DATABASE_READ_URLS by whether reads may go to them (serving) or they are left out (down, lagging, promoted).',
      labelNames: ['state'],
      registers: [app.metrics.registry],
      collect() {
        const serving = standbys.filter((standby) => standby.serving).length;
        this.set({ state: 'serving' }, serving);
        this.set({ state: 'left_out' }, standbys.length - serving);
      },
    });
    app.addHook('onClose', async () => {
      clearInterval(timer);
      await probing;
      await Promise.all(standbys.map((standby) => standby.db.destroy()));
    });
  },
  { name: 'read-replicas', dependencies: ['config', 'metrics', 'db', 'redis'], fastify: '5.x' },
);
