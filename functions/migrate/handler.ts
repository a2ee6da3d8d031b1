/**
 * Lambda entry point that brings the database up to date on deploy: applies pending migrations,
 * then creates or updates each function's login from its secret (SPEC §9). The deployment invokes
 * it before any consumer starts. Invoking it again is a no-op apart from re-setting the logins'
 * passwords to their secrets' values, and concurrent invocations are serialised by the runner's
 * advisory lock.
 */
import type { SecretsManagerClient } from "@aws-sdk/client-secrets-manager";
import pg from "pg";
import { createSecretsManagerClient } from "../../shared/aws/clients.ts";
import { type MigrationReport, runMigrations } from "../../shared/db/migrate.ts";
import { migrateConfigFromEnv } from "./config.ts";
import { type ProvisionedLogin, provisionLogins, readLoginSecret } from "./logins.ts";
import { deploymentMigrationSets } from "./sets.ts";

export interface MigrateResult extends MigrationReport {
  readonly logins: readonly ProvisionedLogin[];
}

export interface MigrateDependencies {
  /** @default a client for the function's region */
  readonly secretsManager?: SecretsManagerClient;
  /** @default console.log */
  readonly log?: (line: string) => void;
}

/** Builds the handler; tests pass a Secrets Manager client pointed at a local endpoint. */
export function createMigrateHandler(deps: MigrateDependencies = {}): () => Promise<MigrateResult> {
  let secretsManager = deps.secretsManager;
  const log = deps.log ?? ((line: string) => console.log(line));
  return async () => {
    // Read before connecting: a configuration or secret problem changes nothing in the database.
    const config = migrateConfigFromEnv(process.env);
    if (config.loginSecrets.length > 0) secretsManager ??= createSecretsManagerClient();
    const logins = await Promise.all(
      config.loginSecrets.map((spec) => readLoginSecret(secretsManager as SecretsManagerClient, spec)),
    );
    const client = new pg.Client({ connectionString: config.databaseUrl });
    await client.connect();
    try {
      const report = await runMigrations({ client, sets: deploymentMigrationSets(), log });
      const provisioned = await provisionLogins(client, logins);
      for (const login of provisioned) log(`login ${login.username} (${login.memberOf}) ${login.outcome}`);
      return { ...report, logins: provisioned };
    } finally {
      await client.end();
    }
  };
}

export const handler = createMigrateHandler();
