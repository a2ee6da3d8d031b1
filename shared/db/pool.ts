/**
 * The connection pool. A Lambda container creates one at start-up and reuses it across
 * invocations; the session settings that bound waiting are sent in the startup packet, so they
 * cost no round trip per transaction. Settings sent there (and the `role`) are the session's reset
 * values: the session resets that end each fence transaction (`RESET ALL`, `RESET ROLE`, migration
 * 0023) return to them, not to the server's defaults.
 *
 * The database is given by connection string or by endpoint and Secrets Manager secret
 * (./credentials.ts). By secret, the pool starts reading the secret when it is created, each new
 * connection takes the current username and password, and a connection refused for its
 * credentials is retried once after the secret is read again.
 */
import pg from "pg";
import {
  credentialsOf,
  type DatabaseConnection,
  retryAfterRefusedLogin,
  type SecretCredentials,
  type SecretEndpoint,
  secretClientConfig,
} from "./credentials.ts";

/** Options of {@link createPool}: the database, and the pool's settings. */
export type PoolOptions = DatabaseConnection & PoolSettings;

/** The settings of a pool, whichever way its database is given. */
export interface PoolSettings {
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
  /**
   * What bounds a checkout that waits for a busy pool (every connection in use): `pool`, the pool
   * itself after connectionTimeoutMs; or `caller`, only the caller, which bounds every checkout by
   * its own deadline (shared/db/connect-before.ts). Opening a new connection is bounded by
   * connectionTimeoutMs either way. A consumer on Lambda Managed Instances, whose concurrent
   * invocations may outnumber its connections, waits `caller`: a record's wait for a connection then
   * ends at its deadline (interrupted, not a failed attempt), never at an earlier fixed timeout.
   * @default "pool"
   */
  readonly busyWait?: "pool" | "caller";
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
  busyWait: "pool",
});

/** Creates a pool with jobfence's session settings. */
export function createPool(options: PoolOptions): pg.Pool {
  const o = { ...POOL_DEFAULTS, ...options };
  const settings: pg.PoolConfig = {
    max: o.max,
    lock_timeout: o.lockTimeoutMs,
    statement_timeout: o.statementTimeoutMs,
    idle_in_transaction_session_timeout: o.idleInTransactionTimeoutMs,
    // pg-pool applies its connectionTimeoutMillis to both kinds of wait; with the caller bounding a
    // busy pool's, the pool gets none and each new client bounds its own connect (pg.Client's).
    connectionTimeoutMillis: o.busyWait === "caller" ? 0 : o.connectionTimeoutMs,
    ...(o.busyWait === "caller" ? { Client: clientConnectingWithin(pg.Client, o.connectionTimeoutMs) } : {}),
    application_name: o.applicationName,
    options: [
      ...(o.role ? [`-c role=${o.role}`] : []),
      `-c client_connection_check_interval=${Math.max(0, Math.floor(o.connectionCheckIntervalMs))}`,
    ].join(" "),
  };
  const pool =
    options.secret === undefined
      ? new pg.Pool({ ...settings, connectionString: options.connectionString })
      : new SecretLoginPool(
          settings,
          options.secret,
          credentialsOf(options),
          o.busyWait === "caller" ? o.connectionTimeoutMs : undefined,
        );
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

/** A client class that gives up opening its connection after `timeoutMs` (pg.Client's own bound). */
function clientConnectingWithin(base: typeof pg.Client, timeoutMs: number): typeof pg.Client {
  return class extends base {
    constructor(config?: string | pg.ClientConfig) {
      super(
        typeof config === "string"
          ? { connectionString: config, connectionTimeoutMillis: timeoutMs }
          : { ...config, connectionTimeoutMillis: timeoutMs },
      );
    }
  };
}

/**
 * A pool whose connections log in with a secret's credentials. The username is taken when each
 * client is created (pg-pool's `Client` option), the password when the server asks for it; a
 * checkout that has to open a connection and is refused for its credentials re-reads the secret
 * and tries once more. (A checkout that waited for a full pool to free a slot is opened by
 * pg-pool itself, without the retry: a refusal there fails that checkout only, and the next one
 * re-reads.)
 */
class SecretLoginPool extends pg.Pool {
  readonly #credentials: SecretCredentials;

  constructor(
    settings: pg.PoolConfig,
    endpoint: SecretEndpoint,
    credentials: SecretCredentials,
    connectTimeoutMs: number | undefined,
  ) {
    class SecretLoginClient extends pg.Client {
      constructor(config?: pg.ClientConfig) {
        super({
          ...config,
          ...secretClientConfig(endpoint, credentials),
          ...(connectTimeoutMs === undefined ? {} : { connectionTimeoutMillis: connectTimeoutMs }),
        });
      }
    }
    super({ ...settings, Client: SecretLoginClient });
    this.#credentials = credentials;
    // Read at init, so the first connection does not wait for Secrets Manager. A failure here is
    // left to that connection, which reads again and reports it.
    credentials.get().catch(() => {});
  }

  override connect(): Promise<pg.PoolClient>;
  override connect(
    callback: (
      err: Error | undefined,
      client: pg.PoolClient | undefined,
      done: (release?: unknown) => void,
    ) => void,
  ): void;
  override connect(
    callback?: (
      err: Error | undefined,
      client: pg.PoolClient | undefined,
      done: (release?: unknown) => void,
    ) => void,
  ): Promise<pg.PoolClient> | undefined {
    const connected = retryAfterRefusedLogin(this.#credentials, async () => {
      // Only before the first read: an idle connection must not wait for Secrets Manager.
      if (this.#credentials.latest === undefined) await this.#credentials.get();
      return super.connect();
    });
    if (!callback) return connected;
    connected.then(
      (client) => callback(undefined, client, (release) => client.release(release as Error | boolean)),
      (error: Error) => callback(error, undefined, () => {}),
    );
    return undefined;
  }
}
