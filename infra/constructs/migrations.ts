/**
 * Migrations on deploy: a CDK Trigger invokes `functions/migrate` (as the migrator login) once per
 * deployment that changes it, after the database exists and before the consumers' event sources
 * are created, so no consumer takes a job against an old schema. After migrating it creates or
 * updates each consumer's login and the ops and cleanup logins from their secrets. A failed
 * migration fails the deployment (and CloudFormation rolls back).
 */
import { Duration, Stack } from "aws-cdk-lib";
import type * as secretsmanager from "aws-cdk-lib/aws-secretsmanager";
import type * as sqs from "aws-cdk-lib/aws-sqs";
import * as triggers from "aws-cdk-lib/triggers";
import { Construct, type IConstruct } from "constructs";
import type { SharedRole } from "../../shared/db/queries/provision-login.ts";
import type { DatabaseAccess, SharedDatabaseLogin } from "./database.ts";
import { jobfenceEntry } from "./entries.ts";
import { JobfenceFunction } from "./jobfence-function.ts";

/** Props of {@link DatabaseMigrations}. */
export interface DatabaseMigrationsProps {
  readonly database: DatabaseAccess;
  /** What must exist before migrating (the cluster, the proxy). @default none */
  readonly executeAfter?: readonly IConstruct[];
  /** What must wait for the migrations (the consumers' event sources, the API). @default none */
  readonly executeBefore?: readonly IConstruct[];
  /** @default 5 minutes */
  readonly timeout?: Duration;
  /**
   * Create or update the function logins from their secrets on every run. Needs a migrator with
   * CREATEROLE (the RDS master user has it); turn it off where a DBA manages users.
   * @default true
   */
  readonly provisionLogins?: boolean;
  /**
   * Each consumer's source queue, registered on every run as the only queue a replay may send that
   * consumer's dead letters to (a dead letter's queue is the consumer's word; migration 0014).
   * Required: a consumer left out would have its replays unrestricted by queue.
   */
  readonly consumerQueues: Readonly<Record<string, sqs.IQueue>>;
  /**
   * Each consumer's fence TTL (its JobConsumer's `fenceTtlSeconds`), registered on every run: the
   * database decides from it when a copy of the consumer's job is `outlived` (migration 0021).
   * @default none registered: the database assumes the default TTL (21 days)
   */
  readonly consumerFenceTtls?: Readonly<Record<string, number>>;
}

/**
 * The group role each shared function login is granted. A consumer's login is granted its
 * consumer's own group role instead (`consumerRoleName`), which the migrate function derives
 * from the consumer's name.
 */
export const LOGIN_ROLES: Readonly<Record<Exclude<SharedDatabaseLogin, "migrator">, SharedRole>> =
  Object.freeze({
    ops: "jobfence_ops",
    cleanup: "jobfence_cleanup",
  });

/** One entry of the migrate function's `JOBFENCE_LOGIN_SECRETS`. */
export type LoginSecretEntry =
  | { readonly secretArn: string; readonly consumer: string }
  | { readonly secretArn: string; readonly memberOf: SharedRole };

/** The migrate function and the trigger that runs it on deploy. */
export class DatabaseMigrations extends Construct {
  readonly migrateFunction: JobfenceFunction;
  readonly trigger: triggers.Trigger;

  constructor(scope: Construct, id: string, props: DatabaseMigrationsProps) {
    super(scope, id);
    const timeout = props.timeout ?? Duration.minutes(5);
    this.migrateFunction = new JobfenceFunction(this, "Migrate", {
      entry: jobfenceEntry("migrate"),
      description: "jobfence database migrations (run on deploy)",
      timeout,
      database: props.database,
      login: "migrator",
      // The migration sets read their SQL files beside their modules (see bundle-with-files.ts).
      bundleWithFiles: true,
    });
    if (props.provisionLogins ?? true) {
      const { secrets } = props.database;
      const logins: Array<{ readonly secret: secretsmanager.ISecret; readonly entry: LoginSecretEntry }> = [
        ...Object.keys(secrets.consumers)
          .sort()
          .map((consumer) => {
            const secret = props.database.secretOf({ consumer });
            return { secret, entry: { secretArn: secret.secretArn, consumer } };
          }),
        ...Object.entries(LOGIN_ROLES).map(([login, memberOf]) => {
          const secret = secrets[login as keyof typeof LOGIN_ROLES];
          return { secret, entry: { secretArn: secret.secretArn, memberOf } };
        }),
      ];
      for (const { secret } of logins) secret.grantRead(this.migrateFunction.function);
      this.migrateFunction.function.addEnvironment(
        "JOBFENCE_LOGIN_SECRETS",
        Stack.of(this).toJsonString(logins.map((login) => login.entry)),
      );
    }
    const queues = Object.entries(props.consumerQueues).sort(([a], [b]) => a.localeCompare(b));
    if (queues.length > 0) {
      this.migrateFunction.function.addEnvironment(
        "JOBFENCE_CONSUMER_QUEUES",
        Stack.of(this).toJsonString(
          Object.fromEntries(queues.map(([consumer, q]) => [consumer, [q.queueUrl]])),
        ),
      );
    }
    const ttls = Object.entries(props.consumerFenceTtls ?? {}).sort(([a], [b]) => a.localeCompare(b));
    if (ttls.length > 0) {
      this.migrateFunction.function.addEnvironment(
        "JOBFENCE_CONSUMER_FENCE_TTLS",
        JSON.stringify(Object.fromEntries(ttls)),
      );
    }
    this.trigger = new triggers.Trigger(this, "Trigger", {
      handler: this.migrateFunction.function,
      timeout,
      invocationType: triggers.InvocationType.REQUEST_RESPONSE,
      executeOnHandlerChange: true,
      // The endpoint's security group carries the migrate function's ingress rule: wait for it.
      executeAfter: [props.database.securityGroup, ...(props.executeAfter ?? [])],
      executeBefore: [...(props.executeBefore ?? [])],
    });
  }
}
