/**
 * The migrate function: brings the database up to date on deploy. It applies `core`'s pending
 * migrations (and any sets its deployment adds), ensures every consumer's group role (the
 * configuration names them), creates or updates each function's login from its secret
 * (docs/design.md §9), and registers each consumer's replay queues, follow-up targets and fence
 * TTL. The deployment invokes it before any consumer starts. Invoking it again is a no-op apart
 * from re-setting the logins' passwords to their secrets' values, and concurrent invocations are
 * serialised by the runner's advisory lock.
 *
 * Everything it knows of the consumers comes from its environment (the DatabaseMigrations
 * construct writes it): it knows no registry, so it serves any deployment.
 */
import type { SecretsManagerClient } from "@aws-sdk/client-secrets-manager";
import type pg from "pg";
import { createSecretsManagerClient } from "../../shared/aws/clients.ts";
import { databaseConnection } from "../../shared/config/fields.ts";
import { connectClient, SecretCredentials } from "../../shared/db/credentials.ts";
import { type MigrationReport, runMigrations } from "../../shared/db/migrate.ts";
import { coreMigrationSet, type MigrationSet } from "../../shared/db/migrations.ts";
import { registerDeclaredFollowUpTargets } from "../../shared/db/queries/follow-up-targets.ts";
import { registerConsumerQueues, registerFenceTtl } from "../../shared/db/queries/provision-login.ts";
import { withTransaction } from "../../shared/db/transaction.ts";
import { migrateConfigFromEnv } from "./config.ts";
import { type ProvisionedLogin, provisionLogins, readLoginSecret } from "./logins.ts";

export interface MigrateResult extends MigrationReport {
  readonly logins: readonly ProvisionedLogin[];
  /** The consumers whose replay queues were registered (core.register_consumer_queues). */
  readonly queuesRegistered: readonly string[];
  /** The consumers whose follow-up targets were registered (core.register_follow_up_targets). */
  readonly followUpTargetsRegistered: readonly string[];
  /** The consumers whose fence TTL was registered (core.register_fence_ttl). */
  readonly fenceTtlsRegistered: readonly string[];
}

/** Registers every consumer's fence TTL in one transaction; returns the consumers, sorted. */
async function registerFenceTtls(
  client: pg.ClientBase,
  ttls: Readonly<Record<string, number>>,
): Promise<string[]> {
  const consumers = Object.keys(ttls).sort();
  if (consumers.length === 0) return [];
  await withTransaction(client, async (tx) => {
    for (const consumer of consumers) await registerFenceTtl(tx, consumer, ttls[consumer] as number);
  });
  return consumers;
}

/** Registers every consumer's replay queues in one transaction; returns the consumers, sorted. */
async function registerQueues(
  client: pg.ClientBase,
  queues: Readonly<Record<string, readonly string[]>>,
): Promise<string[]> {
  const consumers = Object.keys(queues).sort();
  if (consumers.length === 0) return [];
  await withTransaction(client, async (tx) => {
    for (const consumer of consumers) await registerConsumerQueues(tx, consumer, queues[consumer] ?? []);
  });
  return consumers;
}

export interface MigrateDependencies {
  /** @default a client for the function's region */
  readonly secretsManager?: SecretsManagerClient;
  /** @default console.log */
  readonly log?: (line: string) => void;
  /**
   * Migration sets applied after `core`, for a deployment that keeps its consumers' tables in sets
   * jobfence runs (this repository's reference deployment). @default none: `core` only
   */
  readonly sets?: readonly MigrationSet[];
  /** Consumers whose group roles are ensured besides those the configuration names. @default none */
  readonly consumers?: readonly string[];
  /**
   * Follow-up targets registered by sender, under the configuration's (JOBFENCE_FOLLOW_UP_TARGETS
   * decides a sender it names). @default none
   */
  readonly followUpTargets?: Readonly<Record<string, readonly string[]>>;
}

/**
 * Builds the handler; tests pass a Secrets Manager client pointed at a local endpoint, and a
 * deployment with sets of its own passes them.
 */
export function createMigrateHandler(deps: MigrateDependencies = {}): () => Promise<MigrateResult> {
  let secretsManager = deps.secretsManager;
  const log = deps.log ?? ((line: string) => console.log(line));
  return async () => {
    // Read before connecting: a configuration or secret problem changes nothing in the database.
    const config = migrateConfigFromEnv(process.env);
    const connection = databaseConnection(config);
    if (config.loginSecrets.length > 0 || connection.secret) secretsManager ??= createSecretsManagerClient();
    const logins = await Promise.all(
      config.loginSecrets.map((spec) => readLoginSecret(secretsManager as SecretsManagerClient, spec)),
    );
    // By secret, the migrator's own login is read like any function's (re-read if refused).
    const client = await connectClient(
      connection.secret
        ? {
            secret: connection.secret,
            credentials: new SecretCredentials(connection.secret.secretArn, {
              secretsManager: secretsManager as SecretsManagerClient,
            }),
          }
        : connection,
    );
    try {
      // Follow-up targets by sender: the configuration's decide each sender it names.
      const declared = { ...deps.followUpTargets, ...config.followUpTargets };
      // Every consumer's group role, those without migrations of their own too (their tables are
      // the service's, granted to the role by its own migrations): each consumer the configuration
      // names, by its login, queues, fence TTL or follow-up targets (as sender or as target).
      const consumers = [
        ...new Set([
          ...(deps.consumers ?? []),
          ...config.loginSecrets.flatMap((l) => ("consumer" in l ? [l.consumer] : [])),
          ...Object.keys(config.consumerQueues),
          ...Object.keys(config.consumerFenceTtls),
          ...Object.entries(declared).flatMap(([sender, targets]) => [sender, ...targets]),
        ]),
      ].sort();
      const sets = [coreMigrationSet(), ...(deps.sets ?? [])];
      const report = await runMigrations({ client, sets, consumers, log });
      const provisioned = await provisionLogins(client, logins);
      for (const login of provisioned) log(`login ${login.username} (${login.memberOf}) ${login.outcome}`);
      const registered = await registerQueues(client, config.consumerQueues);
      for (const consumer of registered) log(`queues of ${consumer} registered for replays`);
      // Every consumer given, those that send nothing too: a target dropped from a definition's
      // `sends` is no longer one its outbox may write to.
      const senders = await withTransaction(client, (tx) => registerDeclaredFollowUpTargets(tx, declared));
      for (const sender of senders)
        log(`follow-up targets of ${sender} registered: ${declared[sender]?.join(", ") || "none"}`);
      const ttls = await registerFenceTtls(client, config.consumerFenceTtls);
      for (const consumer of ttls)
        log(`fence TTL of ${consumer} registered: ${config.consumerFenceTtls[consumer]} s`);
      return {
        ...report,
        logins: provisioned,
        queuesRegistered: registered,
        followUpTargetsRegistered: senders,
        fenceTtlsRegistered: ttls,
      };
    } finally {
      await client.end();
    }
  };
}
