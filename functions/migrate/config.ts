/** What the migrate function reads from its environment. */
import { z } from "zod";
import {
  CONSUMER_NAME,
  DATABASE_ENV,
  databaseFields,
  jsonField,
  withDatabaseCheck,
} from "../../shared/config/fields.ts";
import { configFromEnv } from "../../shared/config/parse.ts";
import { SHARED_ROLES } from "../../shared/db/queries/provision-login.ts";

const secretArn = z.string().min(1, "must name a Secrets Manager secret");

/**
 * One function login to provision: the secret holding its user name and password, and what it is
 * for: one consumer (its function and its drain share the login), or a shared role.
 */
const loginSecret = z.union([
  z.object({ secretArn, consumer: z.string().regex(CONSUMER_NAME, "must be a consumer name") }).strict(),
  z.object({ secretArn, memberOf: z.enum(SHARED_ROLES) }).strict(),
]);
export type LoginSecret = z.output<typeof loginSecret>;

const loginSecrets = jsonField(z.array(loginSecret));

/** Each consumer's source queue URLs: the only queues a replay may send its dead letters to. */
const consumerQueues = jsonField(
  z.record(
    z.string().regex(CONSUMER_NAME, "must be a consumer name"),
    z
      .array(z.url({ protocol: /^https?$/ }))
      .min(1)
      .max(16),
  ),
);

/** Each consumer's fence TTL in seconds, as its harness writes it (migration 0021). */
const consumerFenceTtls = jsonField(
  z.record(
    z.string().regex(CONSUMER_NAME, "must be a consumer name"),
    z.number().int().min(86_401).max(315_360_000),
  ),
);

/**
 * Each consumer's follow-up targets (its definition's `sends`), by sender: registered as the only
 * consumers its outbox may write to. A sender given with no targets has every target revoked.
 */
const followUpTargets = jsonField(
  z.record(
    z.string().regex(CONSUMER_NAME, "must be a consumer name"),
    z.array(z.string().regex(CONSUMER_NAME, "must be a consumer name")).max(64),
  ),
);

const schema = withDatabaseCheck(
  z.object({
    /** The migrator's login: a connection string, or its secret and endpoint. */
    ...databaseFields,
    loginSecrets: loginSecrets.default([]),
    consumerQueues: consumerQueues.default({}),
    consumerFenceTtls: consumerFenceTtls.default({}),
    followUpTargets: followUpTargets.default({}),
  }),
);

export const MIGRATE_ENV = Object.freeze({
  ...DATABASE_ENV,
  /**
   * JSON: `[{"secretArn": "...", "consumer": "award-points"}, {"secretArn": "...", "memberOf": "jobfence_ops"}, ...]`;
   * unset provisions none.
   */
  loginSecrets: "JOBFENCE_LOGIN_SECRETS",
  /** JSON: `{"award-points": ["https://sqs…/award-points"], ...}`; unset registers none. */
  consumerQueues: "JOBFENCE_CONSUMER_QUEUES",
  /** JSON: `{"award-points": 1814400, ...}`; unset registers none (the database assumes 21 days). */
  consumerFenceTtls: "JOBFENCE_CONSUMER_FENCE_TTLS",
  /**
   * JSON: `{"award-points": ["notify-user"], "notify-user": []}`, written by the DatabaseMigrations
   * construct from its consumers' definitions; unset registers none (and revokes none).
   */
  followUpTargets: "JOBFENCE_FOLLOW_UP_TARGETS",
});

export type MigrateConfig = z.output<typeof schema>;

export function migrateConfigFromEnv(env: NodeJS.ProcessEnv): MigrateConfig {
  return configFromEnv(schema, MIGRATE_ENV, env, "migrate function");
}
