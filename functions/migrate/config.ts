/** What the migrate function reads from its environment. */
import { z } from "zod";
import { databaseUrlField } from "../../shared/config/fields.ts";
import { configFromEnv } from "../../shared/config/parse.ts";
import { GROUP_ROLES } from "../../shared/db/queries/provision-login.ts";

/** One function login to provision: the secret holding its user name and password, and its role. */
const loginSecret = z.object({
  secretArn: z.string().min(1, "must name a Secrets Manager secret"),
  memberOf: z.enum(GROUP_ROLES),
});
export type LoginSecret = z.output<typeof loginSecret>;

const loginSecrets = z
  .string()
  .transform((text, ctx) => {
    try {
      return JSON.parse(text) as unknown;
    } catch {
      ctx.addIssue({ code: "custom", message: "must be JSON" });
      return z.NEVER;
    }
  })
  .pipe(z.array(loginSecret));

const schema = z.object({
  databaseUrl: databaseUrlField,
  loginSecrets: loginSecrets.default([]),
});

export const MIGRATE_ENV = Object.freeze({
  databaseUrl: "DATABASE_URL",
  /** JSON: `[{"secretArn": "...", "memberOf": "jobfence_consumer"}, ...]`; unset provisions none. */
  loginSecrets: "JOBFENCE_LOGIN_SECRETS",
});

export type MigrateConfig = z.output<typeof schema>;

export function migrateConfigFromEnv(env: NodeJS.ProcessEnv): MigrateConfig {
  return configFromEnv(schema, MIGRATE_ENV, env, "migrate function");
}
