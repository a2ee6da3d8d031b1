/**
 * Where a function's database login comes from. Two ways, and a function is given exactly one:
 *
 * - a connection string (`DATABASE_URL`), for the local stack, the tests and scripts: the
 *   password, if any, is in it;
 * - an endpoint (host, port, database, sslmode) and the Secrets Manager secret of the function's
 *   login (`username` and `password`, as RDS writes them), for deployed functions: nothing secret
 *   is in their configuration, and a rotated password reaches them without a deploy.
 *
 * A {@link SecretCredentials} reads the secret through Powertools' SecretsProvider when the pool is
 * created (the function's init), keeps the value for `maxAgeSeconds`, and reads it again at once
 * when PostgreSQL refuses a login (SQLSTATE 28P01 or 28000): the connection is then tried once
 * more with what the secret holds now. node-postgres asks for the password of each new connection
 * (its `password` option may be an async function), so every connection takes the current value.
 *
 * A rotation that changes the username too (Secrets Manager's alternating-users strategy) is
 * followed: each new connection takes its username from the latest read of the secret when it is
 * created, and a mismatch (the secret changed between that read and the password's) ends in one
 * refused login, a re-read and a retry, as for a new password. Connections already open keep their
 * session under the old user: PostgreSQL checks credentials only when a session starts.
 */
import { SecretsProvider } from "@aws-lambda-powertools/parameters/secrets";
import type { SecretsManagerClient } from "@aws-sdk/client-secrets-manager";
import pg from "pg";
import { z } from "zod";
import { createSecretsManagerClient } from "../aws/clients.ts";
import { LoginSecretError } from "../errors/database.ts";

/** libpq `sslmode` values a secret login accepts. */
export const SSL_MODES = ["verify-full", "verify-ca", "require", "disable"] as const;
/** One of {@link SSL_MODES}. */
export type SslMode = (typeof SSL_MODES)[number];

/** Named defaults of the secret way. */
export const CREDENTIALS_DEFAULTS = Object.freeze({
  /**
   * How long a read of the secret is used before the next new connection reads it again. A
   * rotation does not wait for it (a refused login re-reads at once); it bounds how long a
   * container goes on offering a password that still works but is no longer the secret's.
   */
  maxAgeSeconds: 300,
  /**
   * A refused login re-reads the secret at most this often per container: a rotation's new
   * password is picked up at the first refusal, and a password that stays wrong costs one read per
   * interval, not one per connection attempt.
   */
  minRefreshIntervalMs: 5000,
  /** PostgreSQL's port. */
  port: 5432,
  /** RDS and RDS Proxy present certificates that are verified, host name included. */
  sslMode: "verify-full" satisfies SslMode,
});

/**
 * SQLSTATEs of a login PostgreSQL refused: `invalid_password` (a wrong password) and
 * `invalid_authorization_specification` (among others, a user that does not exist, as after a
 * username change the database has not seen yet).
 */
export const AUTHENTICATION_FAILURES: readonly string[] = Object.freeze(["28P01", "28000"]);

/** The non-secret facts of a deployed function's database, and the secret of its login. */
export interface SecretEndpoint {
  /** ARN (or name) of the Secrets Manager secret holding `username` and `password`. */
  readonly secretArn: string;
  readonly host: string;
  readonly port: number;
  readonly database: string;
  readonly sslMode: SslMode;
}

/** A database to connect to: by connection string, or by endpoint and secret. */
export type DatabaseConnection =
  | { readonly connectionString: string; readonly secret?: undefined }
  | {
      readonly secret: SecretEndpoint;
      /** @default a SecretCredentials of `secret.secretArn` with its defaults */
      readonly credentials?: SecretCredentials;
      readonly connectionString?: undefined;
    };

/** A login's username and password. */
export interface DatabaseCredentials {
  readonly username: string;
  readonly password: string;
}

/** Options of {@link SecretCredentials}. */
export interface SecretCredentialsOptions {
  /** @default a client from `createSecretsManagerClient()` (bounded timeouts) */
  readonly secretsManager?: SecretsManagerClient;
  /** @default CREDENTIALS_DEFAULTS.maxAgeSeconds */
  readonly maxAgeSeconds?: number;
  /** @default CREDENTIALS_DEFAULTS.minRefreshIntervalMs */
  readonly minRefreshIntervalMs?: number;
  /** The clock the refresh interval is measured on. @default Date.now */
  readonly now?: () => number;
}

/** The fields of an RDS-style database secret a login needs; others (host, engine…) are ignored. */
const secretValue = z.object({ username: z.string().min(1), password: z.string().min(1) });

/** One login's credentials from its Secrets Manager secret: cached, and re-read on demand. */
export class SecretCredentials {
  /** The secret read. */
  readonly secretArn: string;
  readonly #provider: SecretsProvider;
  readonly #maxAgeSeconds: number;
  #latest: DatabaseCredentials | undefined;
  #inFlight: Promise<DatabaseCredentials> | undefined;
  /** Whether the read in flight bypasses the cache (so a refresh may share it). */
  #inFlightForced = false;
  /** When the last forced read completed (ms since the epoch), to space them out. */
  #lastForcedAt = Number.NEGATIVE_INFINITY;
  readonly #minRefreshIntervalMs: number;
  readonly #now: () => number;

  constructor(secretArn: string, options: SecretCredentialsOptions = {}) {
    this.secretArn = secretArn;
    this.#provider = new SecretsProvider({
      awsSdkV3Client: options.secretsManager ?? createSecretsManagerClient(),
    });
    this.#maxAgeSeconds = options.maxAgeSeconds ?? CREDENTIALS_DEFAULTS.maxAgeSeconds;
    this.#minRefreshIntervalMs = options.minRefreshIntervalMs ?? CREDENTIALS_DEFAULTS.minRefreshIntervalMs;
    this.#now = options.now ?? Date.now;
  }

  /** What the last read returned, if one has completed. */
  get latest(): DatabaseCredentials | undefined {
    return this.#latest;
  }

  /**
   * The credentials: the cached read while it is younger than `maxAgeSeconds`, else a new one. A
   * read in flight (the one started at init, a refresh) is shared, not repeated.
   */
  get(): Promise<DatabaseCredentials> {
    return this.#inFlight ?? this.#start(false);
  }

  /**
   * Reads the secret now, bypassing the cache (after a refused login). Calls made while a forced
   * read is in flight share it, so a burst of refused connections reads the secret once.
   */
  refresh(): Promise<DatabaseCredentials> {
    if (this.#inFlight !== undefined && this.#inFlightForced) return this.#inFlight;
    // A password that stays wrong (a rotation half done, a secret edited by hand) must not turn every
    // refused connection into a Secrets Manager read: within the interval, the last read stands.
    if (this.#latest !== undefined && this.#now() - this.#lastForcedAt < this.#minRefreshIntervalMs) {
      return Promise.resolve(this.#latest);
    }
    return this.#start(true);
  }

  #start(forceFetch: boolean): Promise<DatabaseCredentials> {
    const read = this.#read(forceFetch).finally(() => {
      if (this.#inFlight === read) this.#inFlight = undefined;
      if (forceFetch) this.#lastForcedAt = this.#now();
    });
    this.#inFlight = read;
    this.#inFlightForced = forceFetch;
    return read;
  }

  async #read(forceFetch: boolean): Promise<DatabaseCredentials> {
    const value = await this.#provider.get(this.secretArn, { maxAge: this.#maxAgeSeconds, forceFetch });
    if (typeof value !== "string") throw new LoginSecretError(`secret ${this.secretArn} has no string value`);
    let json: unknown;
    try {
      json = JSON.parse(value);
    } catch {
      throw new LoginSecretError(`secret ${this.secretArn} is not JSON`);
    }
    const parsed = secretValue.safeParse(json);
    // The secret's content is never echoed: the message names only the fields that are wrong.
    if (!parsed.success) {
      const fields = [...new Set(parsed.error.issues.map((issue) => issue.path.join(".")))].join(", ");
      throw new LoginSecretError(
        `secret ${this.secretArn} needs string fields username and password (bad: ${fields})`,
      );
    }
    this.#latest = parsed.data;
    return parsed.data;
  }
}

/** Whether `error` is PostgreSQL refusing a login (see {@link AUTHENTICATION_FAILURES}). */
export function isAuthenticationFailure(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && AUTHENTICATION_FAILURES.includes(code);
}

/**
 * Runs `connect`; when the database refuses the login, re-reads the secret and runs it once more.
 * A second refusal is the caller's (the secret and the database disagree: a rotation half done).
 */
export async function retryAfterRefusedLogin<T>(
  credentials: SecretCredentials,
  connect: () => Promise<T>,
): Promise<T> {
  try {
    return await connect();
  } catch (error) {
    if (!isAuthenticationFailure(error)) throw error;
    await credentials.refresh();
    return connect();
  }
}

/** node-postgres's `ssl` for a libpq `sslmode`. */
export function sslOption(mode: SslMode): pg.ClientConfig["ssl"] {
  switch (mode) {
    case "disable":
      return false;
    case "verify-ca":
      // The chain is verified, the host name is not (libpq's verify-ca).
      return { checkServerIdentity: () => undefined };
    // node-postgres treats `require` as `verify-full` too; so does this.
    case "require":
    case "verify-full":
      return {};
  }
}

/**
 * The node-postgres settings of a secret login: the endpoint, TLS by sslmode, the username of the
 * latest read, and the password asked for at each new connection (so from the cache, or a new read
 * once it is older than its max age).
 */
export function secretClientConfig(
  endpoint: SecretEndpoint,
  credentials: SecretCredentials,
): pg.ClientConfig {
  const username = credentials.latest?.username;
  return {
    host: endpoint.host,
    port: endpoint.port,
    database: endpoint.database,
    ssl: sslOption(endpoint.sslMode),
    ...(username === undefined ? {} : { user: username }),
    password: async () => (await credentials.get()).password,
  };
}

/** The credentials of a secret connection: the given ones, or new ones for its secret. */
export function credentialsOf(
  connection: Extract<DatabaseConnection, { secret: SecretEndpoint }>,
): SecretCredentials {
  return connection.credentials ?? new SecretCredentials(connection.secret.secretArn);
}

/**
 * A connected `pg.Client` (the migrate function's: it needs one session, not a pool). By secret,
 * the secret is read first and a refused login is retried once after re-reading it.
 */
export async function connectClient(
  connection: DatabaseConnection,
  settings: Omit<
    pg.ClientConfig,
    "connectionString" | "user" | "password" | "host" | "port" | "database"
  > = {},
): Promise<pg.Client> {
  const open = async (config: pg.ClientConfig): Promise<pg.Client> => {
    const client = new pg.Client({ ...settings, ...config });
    try {
      await client.connect();
    } catch (error) {
      // The session never started; close the socket without waiting on it.
      client.end().catch(() => {});
      throw error;
    }
    return client;
  };
  if (connection.secret === undefined) return open({ connectionString: connection.connectionString });
  const { secret } = connection;
  const credentials = credentialsOf(connection);
  return retryAfterRefusedLogin(credentials, async () => {
    await credentials.get();
    return open(secretClientConfig(secret, credentials));
  });
}
