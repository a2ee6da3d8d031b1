/** The API Lambda's configuration, from its environment; refused at start-up with every problem listed. */
import { z } from "zod";
import {
  DATABASE_ENV,
  databaseFields,
  dbRoleField,
  jsonField,
  secretArnField,
  withDatabaseCheck,
} from "../../shared/config/fields.ts";
import { configFromEnv } from "../../shared/config/parse.ts";
import { MAX_TOKEN_AGE_BOUNDS, TOKEN_VERIFIER_DEFAULTS } from "../../shared/http/auth.ts";

export const API_ENV = Object.freeze({
  ...DATABASE_ENV,
  dbRole: "JOBFENCE_DB_ROLE",
  issuer: "JOBFENCE_JWT_ISSUER",
  audience: "JOBFENCE_JWT_AUDIENCE",
  jwksUrl: "JOBFENCE_JWKS_URL",
  jwks: "JOBFENCE_JWKS",
  jwtMaxAgeSeconds: "JOBFENCE_JWT_MAX_AGE_SECONDS",
  lockTimeoutMs: "JOBFENCE_LOCK_TIMEOUT_MS",
  poolMax: "JOBFENCE_POOL_MAX",
  signingKeySecretArn: "JOBFENCE_SIGNING_KEY_SECRET_ARN",
  bulkConfirmAbove: "JOBFENCE_BULK_CONFIRM_ABOVE",
});

const schema = withDatabaseCheck(
  z
    .object({
      ...databaseFields,
      dbRole: dbRoleField.optional(),
      issuer: z.string().min(1),
      audience: z.string().min(1),
      // Keys fetched over plain HTTP are whatever anyone on the path says they are.
      jwksUrl: z.url({ protocol: /^https$/, error: "must be an https:// URL" }).optional(),
      jwks: jsonField(
        z.object({ keys: z.array(z.record(z.string(), z.unknown())).min(1) }),
        "must be a JSON Web Key Set",
      ).optional(),
      /** A token is refused once its `iat` is older than this, whatever its `exp` says. */
      jwtMaxAgeSeconds: z.coerce
        .number()
        .int()
        .min(MAX_TOKEN_AGE_BOUNDS.min)
        .max(MAX_TOKEN_AGE_BOUNDS.max)
        .default(TOKEN_VERIFIER_DEFAULTS.maxTokenAgeSeconds),
      /** A replay waits this long at most for a concurrent decision on the same dead letter. */
      lockTimeoutMs: z.coerce.number().int().positive().default(5000),
      poolMax: z.coerce.number().int().positive().max(100).default(4),
      /** The Secrets Manager secret holding the key that signs cursors and plan tokens. */
      signingKeySecretArn: secretArnField,
      /** Bulk operations over more rows than this need their plan's token. */
      bulkConfirmAbove: z.coerce.number().int().min(0).max(1_000_000).default(100),
    })
    .strict()
    .refine((c) => (c.jwksUrl === undefined) !== (c.jwks === undefined), {
      message: `set exactly one of ${API_ENV.jwksUrl} and ${API_ENV.jwks}`,
    }),
);

export type ApiConfig = z.output<typeof schema>;

export function apiConfigFromEnv(env: NodeJS.ProcessEnv = process.env): ApiConfig {
  return configFromEnv(schema, API_ENV, env, "dead-letter API environment");
}
