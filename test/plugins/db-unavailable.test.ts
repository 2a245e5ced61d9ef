/** Which errors mean "the database is not reachable" (503, retry later) rather than a failed query (500). */
import pg from 'pg';
import t from 'tap';
import { isDatabaseUnavailable } from '../../plugins/db.js';

const systemError = (code: string) => Object.assign(new Error(`connect ${code} 127.0.0.1:5432`), { code, syscall: 'connect' });
const serverError = (code: string, message: string) => Object.assign(new pg.DatabaseError(message, 0, 'error'), { code });

t.test('the database is away: refused, cut, restarting, starting up, full, read-only', async (t) => {
  const away: [string, unknown][] = [
    ['refused', systemError('ECONNREFUSED')],
    ['reset', systemError('ECONNRESET')],
    ['unknown host', systemError('ENOTFOUND')],
    ['every address refused', new AggregateError([systemError('ECONNREFUSED'), systemError('ECONNREFUSED')])],
    ['57P01 admin_shutdown', serverError('57P01', 'terminating connection due to administrator command')],
    ['57P02 crash_shutdown', serverError('57P02', 'terminating connection because of crash of another server process')],
    ['57P03 cannot_connect_now', serverError('57P03', 'the database system is starting up')],
    ['53300 too_many_connections', serverError('53300', 'sorry, too many clients already')],
    ['25006 read_only_sql_transaction (a standby mid-failover)', serverError('25006', 'cannot execute INSERT in a read-only transaction')],
    ['08006 connection_failure', serverError('08006', 'connection failure')],
    ['socket closed', new Error('Connection terminated unexpectedly')],
    ['connect timeout', new Error('Connection terminated due to connection timeout')],
    ['a client that lost its connection', new Error('Client has encountered a connection error and is not queryable')],
    ['pool timeout', new Error('timeout exceeded when trying to connect')],
    ['wrapped', new Error('insert failed', { cause: systemError('ECONNREFUSED') })],
  ];
  for (const [name, error] of away) t.ok(isDatabaseUnavailable(error), name);
});

t.test('a query that is wrong, or anything else, is not an outage', async (t) => {
  const other: [string, unknown][] = [
    ['unique violation', serverError('23505', 'duplicate key value violates unique constraint')],
    ['syntax error', serverError('42601', 'syntax error at or near "selec"')],
    ['statement timeout', serverError('57014', 'canceling statement due to statement timeout')],
    ['protocol violation', serverError('08P01', 'insufficient data left in message')],
    ['plain error', new Error('boom')],
    ['not an error', 'ECONNREFUSED'],
    ['nothing', undefined],
  ];
  for (const [name, error] of other) t.notOk(isDatabaseUnavailable(error), name);
});
