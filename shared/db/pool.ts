/**
 * The connection pool. A Lambda container creates one at start-up and reuses it across
 * invocations; the session settings that bound waiting (SPEC §3) are sent in the startup packet,
 * so they cost no round trip per transaction.
 */
import pg from "pg";

/** Options of {@link createPool}. */
export interface PoolOptions {
  readonly connectionString: string;
  /**
   * Connections per pool. A consumer processes one record at a time, so one connection serves it;
   * the second lets a dead-letter write proceed while a broken connection is being replaced.
   * @default 2
   */
  readonly max?: number;
  /**
   * How long a transaction waits for a row lock, e.g. a concurrent duplicate's fence, before it
   * fails (transiently) instead of holding the connection indefinitely.
   * @default 5000
   */
  readonly lockTimeoutMs?: number;
  /**
   * Statements running longer are cancelled.
   * @default 60000
   */
  readonly statementTimeoutMs?: number;
  /**
   * A session idle inside a transaction longer than this is ended by the server, so a frozen
   * container cannot hold locks (and a fence row's lock) forever.
   * @default 60000
   */
  readonly idleInTransactionTimeoutMs?: number;
  /**
   * How long to wait for a connection (new or from the pool).
   * @default 10000
   */
  readonly connectionTimeoutMs?: number;
  /**
   * A role to SET at connection start, for a login that is a member of its jobfence role without
   * inheriting its privileges (NOINHERIT).
   * @default none: the login's own privileges
   */
  readonly role?: string;
  /**
   * How often the server checks, during a long statement, that the client is still there
   * (PostgreSQL 14+ on Linux). When the harness destroys a connection at the invocation's deadline,
   * this is how soon the server stops the statement the work left running and rolls it back,
   * releasing the fence's lock for the next delivery. 0 turns the check off.
   * @default 1000
   */
  readonly connectionCheckIntervalMs?: number;
  /** Shown in pg_stat_activity. @default "jobfence" */
  readonly applicationName?: string;
  /** Receives errors of idle connections (a restarted server); without a listener they would crash the process. */
  readonly onIdleError?: (error: Error) => void;
}

/** Named defaults of {@link PoolOptions}. */
export const POOL_DEFAULTS = Object.freeze({
  max: 2,
  lockTimeoutMs: 5000,
  statementTimeoutMs: 60_000,
  idleInTransactionTimeoutMs: 60_000,
  connectionTimeoutMs: 10_000,
  connectionCheckIntervalMs: 1000,
  applicationName: "jobfence",
});

/** Creates a pool with jobfence's session settings. */
export function createPool(options: PoolOptions): pg.Pool {
  const o = { ...POOL_DEFAULTS, ...options };
  const pool = new pg.Pool({
    connectionString: o.connectionString,
    max: o.max,
    lock_timeout: o.lockTimeoutMs,
    statement_timeout: o.statementTimeoutMs,
    idle_in_transaction_session_timeout: o.idleInTransactionTimeoutMs,
    connectionTimeoutMillis: o.connectionTimeoutMs,
    application_name: o.applicationName,
    options: [
      ...(o.role ? [`-c role=${o.role}`] : []),
      `-c client_connection_check_interval=${Math.max(0, Math.floor(o.connectionCheckIntervalMs))}`,
    ].join(" "),
  });
  pool.on("error", o.onIdleError ?? (() => {}));
  // pg-pool listens for errors only while a client is idle. A checked-out client whose backend
  // dies (terminated, the server restarted) emits 'error' too, and with no listener that is an
  // uncaught exception that kills the process. The query in flight rejects on its own, and the
  // harness then releases the client with the error, so the pool destroys it; nothing more to do.
  pool.on("connect", (client) => {
    client.on("error", () => {});
  });
  return pool;
}
