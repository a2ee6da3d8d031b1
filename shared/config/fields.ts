/**
 * Configuration fields every jobfence function reads, defined once so each function refuses the
 * same bad values with the same message.
 */
import { z } from "zod";
import { CREDENTIALS_DEFAULTS, type DatabaseConnection, SSL_MODES } from "../db/credentials.ts";
import { ConfigurationError } from "../errors/configuration.ts";

/** A PostgreSQL connection string. */
export const databaseUrlField = z
  .string()
  .regex(/^postgres(ql)?:\/\//, "must be a postgres:// connection string");

/** A role to SET on each connection, for a login that does not inherit its jobfence role. */
export const dbRoleField = z
  .string()
  .regex(/^[a-z_][a-z0-9_]{0,62}$/, "must be a plain PostgreSQL role name");

/** The ops EventBridge bus (never a domain bus). */
export const opsBusNameField = z
  .string()
  .regex(/^[A-Za-z0-9._\-/]{1,256}$/, "must be an EventBridge bus name");

/**
 * A variable holding JSON, read as `schema`: text that is not JSON is refused with `notJson` (what
 * the value should be), anything else by `schema`'s own messages.
 */
export function jsonField<S extends z.ZodType>(schema: S, notJson = "must be JSON") {
  return z
    .string()
    .transform((text, ctx) => {
      try {
        return JSON.parse(text) as unknown;
      } catch {
        ctx.addIssue({ code: "custom", message: notJson });
        return z.NEVER;
      }
    })
    .pipe(schema);
}

/**
 * A consumer's name: lowercase letters, digits and dashes, starting with a letter, at most 63; and
 * none whose schema (its name with `-` as `_`) would be PostgreSQL's or jobfence's (see
 * {@link consumerNameCollision}).
 */
export const CONSUMER_NAME = /^(?!(?:public|core|information-schema)$|pg-)[a-z][a-z0-9-]{0,62}$/;

/**
 * Why `name` cannot be a consumer's because its schema or role would be one PostgreSQL or jobfence
 * has (`public`, `core`, `information_schema`, `pg_…`: the consumer would own it, and every object
 * in it would count as its own), or undefined.
 */
export function consumerNameCollision(name: string): string | undefined {
  const schema = name.replaceAll("-", "_");
  const reserved =
    schema === "public" || schema === "information_schema" || schema === "core" || schema.startsWith("pg_");
  return reserved
    ? `consumer name "${name}" is refused: its schema would be ${schema}, which PostgreSQL or jobfence already uses (${schema === "core" ? "jobfence's own" : "PostgreSQL's own"}), and every object in it would count as the consumer's: choose another name`
    : undefined;
}

/** Why `name` cannot be a consumer's, one line, or undefined. */
export function consumerNameProblem(name: unknown): string | undefined {
  if (typeof name === "string" && CONSUMER_NAME.test(name)) return undefined;
  const collision = typeof name === "string" ? consumerNameCollision(name) : undefined;
  return (
    collision ??
    `consumer name ${JSON.stringify(name)} must be 1–63 lowercase letters, digits or dashes, starting with a letter`
  );
}

const targetQueues = z.record(z.string().regex(CONSUMER_NAME, "must be a consumer name"), z.url());

/**
 * The queue URL of each consumer a consumer sends follow-ups to, by name: an object, or in the
 * environment JSON of one.
 */
export const targetQueuesField = z.union([
  targetQueues,
  jsonField(targetQueues, "must be a JSON object of consumer names to queue URLs"),
]);

/** A Secrets Manager secret's ARN. */
export const secretArnField = z
  .string()
  .regex(/^arn:[^:]+:secretsmanager:/, "must be a Secrets Manager secret ARN");

/**
 * The environment variables of a function's database, by configuration key. Exactly one way is
 * given: `DATABASE_URL` (local stack, tests), or the secret of the function's login with the
 * endpoint it logs in to (deployed; nothing secret in the environment).
 */
export const DATABASE_ENV = Object.freeze({
  databaseUrl: "DATABASE_URL",
  dbSecretArn: "JOBFENCE_DB_SECRET_ARN",
  dbHost: "JOBFENCE_DB_HOST",
  dbPort: "JOBFENCE_DB_PORT",
  dbName: "JOBFENCE_DB_NAME",
  dbSslMode: "JOBFENCE_DB_SSLMODE",
});

/**
 * The database fields of every function's configuration (spread into its zod object; check the
 * object with {@link checkDatabaseFields}, and connect with {@link databaseConnection}).
 */
export const databaseFields = {
  /** A connection string, password included: the local stack and the tests. */
  databaseUrl: databaseUrlField.optional(),
  /** The secret of the function's login (`username`, `password`): deployed functions. */
  dbSecretArn: secretArnField.optional(),
  /** Host name (or address) of the database or its proxy. */
  dbHost: z
    .string()
    .regex(/^[A-Za-z0-9._:-]{1,253}$/, "must be a host name or IP address")
    .optional(),
  /** @default CREDENTIALS_DEFAULTS.port (5432) */
  dbPort: z.coerce.number().int().min(1).max(65_535).optional(),
  dbName: z.string().min(1).max(63).optional(),
  /** libpq sslmode. @default CREDENTIALS_DEFAULTS.sslMode ("verify-full") */
  dbSslMode: z.enum(SSL_MODES).optional(),
};

/** What {@link databaseFields} parse to. */
export type DatabaseFields = {
  readonly [K in keyof typeof databaseFields]?: z.output<(typeof databaseFields)[K]>;
};

/** The fields of the secret way: given one, the function is configured by secret. */
const SECRET_KEYS = ["dbSecretArn", "dbHost", "dbPort", "dbName", "dbSslMode"] as const;
/** The secret way's fields that have no default. */
const SECRET_REQUIRED = ["dbSecretArn", "dbHost", "dbName"] as const;

/**
 * Adds to a configuration schema holding {@link databaseFields} the check that the database is
 * given exactly one way, and the secret way completely. The check runs even when other fields
 * failed (zod's `when`), so a missing database is reported with every other problem.
 */
export function withDatabaseCheck<S extends z.ZodType>(schema: S): S {
  return schema.superRefine(checkDatabaseFields, { when: () => true });
}

function checkDatabaseFields(value: unknown, ctx: z.RefinementCtx): void {
  if (typeof value !== "object" || value === null) return;
  const given = (key: keyof typeof DATABASE_ENV) => (value as Record<string, unknown>)[key] !== undefined;
  const secretGiven = SECRET_KEYS.filter(given);
  const secretWay = `${DATABASE_ENV.dbSecretArn} with ${DATABASE_ENV.dbHost} and ${DATABASE_ENV.dbName}`;
  if (given("databaseUrl") && secretGiven.length > 0) {
    ctx.addIssue({
      code: "custom",
      path: ["databaseUrl"],
      message:
        `give the database one way, not both: ${DATABASE_ENV.databaseUrl} or ${secretWay} ` +
        `(also set: ${secretGiven.map((key) => DATABASE_ENV[key]).join(", ")})`,
    });
  } else if (!given("databaseUrl") && secretGiven.length === 0) {
    ctx.addIssue({
      code: "custom",
      path: ["databaseUrl"],
      message: `required, or instead ${secretWay} (the secret of the function's login)`,
    });
  } else if (!given("databaseUrl")) {
    for (const key of SECRET_REQUIRED.filter((k) => !given(k))) {
      ctx.addIssue({
        code: "custom",
        path: [key],
        message: `required with ${secretGiven.map((k) => DATABASE_ENV[k]).join(", ")} (the database by secret)`,
      });
    }
  }
}

/** The connection a valid configuration describes (see {@link checkDatabaseFields}). */
export function databaseConnection(config: DatabaseFields): DatabaseConnection {
  if (config.databaseUrl !== undefined) return { connectionString: config.databaseUrl };
  const { dbSecretArn, dbHost, dbName } = config;
  if (dbSecretArn === undefined || dbHost === undefined || dbName === undefined) {
    throw new ConfigurationError("database", [
      `give ${DATABASE_ENV.databaseUrl}, or ${DATABASE_ENV.dbSecretArn} with ${DATABASE_ENV.dbHost} and ${DATABASE_ENV.dbName}`,
    ]);
  }
  return {
    secret: {
      secretArn: dbSecretArn,
      host: dbHost,
      port: config.dbPort ?? CREDENTIALS_DEFAULTS.port,
      database: dbName,
      sslMode: config.dbSslMode ?? CREDENTIALS_DEFAULTS.sslMode,
    },
  };
}
