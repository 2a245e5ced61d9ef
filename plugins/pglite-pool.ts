import type { PGlite } from '@electric-sql/pglite';
import type { PostgresPool, PostgresPoolClient, PostgresQueryResult } from 'kysely';

type Command = PostgresQueryResult<unknown>['command'];

/**
 * A pg-Pool look-alike over one PGlite instance, so Kysely's own PostgresDialect drives the
 * embedded database too. PGlite has a single session: `connect` hands it out one caller at a time,
 * which keeps a transaction's statements together. It counts its session as pg.Pool counts its
 * connections, for the pool metrics.
 */
export class PGlitePool implements PostgresPool {
  #queue: Promise<void> = Promise.resolve();
  /** Callers holding the session or waiting for it. */
  #callers = 0;
  readonly totalCount = 1;
  /** Kysely passes these to a control client (pool.Client) to cancel a query; there is none, so it cancels through connect(). */
  readonly options = {};

  constructor(private readonly pglite: PGlite) {}

  get idleCount(): number {
    return this.#callers === 0 ? 1 : 0;
  }

  get waitingCount(): number {
    return Math.max(0, this.#callers - 1);
  }

  async connect(): Promise<PostgresPoolClient> {
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const turn = this.#queue;
    this.#queue = turn.then(() => released);
    this.#callers++;
    await turn;
    // PGlite runs a statement on this thread, and the next caller's turn follows in promise
    // callbacks: without a turn of the event loop in between, a burst of one user's statements
    // would run back to back while other requests could not even be read.
    await new Promise((resolve) => setImmediate(resolve));
    const pglite = this.pglite;
    return {
      async query<R>(sql: string, parameters: readonly unknown[]): Promise<PostgresQueryResult<R>> {
        const result = await pglite.query<R>(sql, parameters as unknown[]);
        const command = (sql.trimStart().split(/\s/, 1)[0] ?? '').toUpperCase() as Command;
        return { command, rowCount: result.affectedRows ?? result.rows.length, rows: result.rows };
      },
      release: () => {
        this.#callers--;
        release();
      },
    } as PostgresPoolClient;
  }

  async end(): Promise<void> {
    await this.pglite.close();
  }
}
