/**
 * Migrations on deploy: a CDK Trigger invokes `functions/migrate` (as the migrator login) once per
 * deployment that changes it, after the database exists and before the consumers' event sources
 * are created, so no consumer takes a job against an old schema. After migrating it creates or
 * updates the consumer, ops and cleanup logins from their secrets (migration 0006). A failed
 * migration fails the deployment (and CloudFormation rolls back).
 */
import { Duration, Stack } from "aws-cdk-lib";
import * as triggers from "aws-cdk-lib/triggers";
import { Construct, type IConstruct } from "constructs";
import type { GroupRole } from "../../shared/db/queries/provision-login.ts";
import type { DatabaseAccess, DatabaseLogin } from "./database.ts";
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
}

/** The group role each function login is granted (SPEC §9). */
export const LOGIN_ROLES: Readonly<Record<Exclude<DatabaseLogin, "migrator">, GroupRole>> = Object.freeze({
  consumer: "jobfence_consumer",
  ops: "jobfence_ops",
  cleanup: "jobfence_cleanup",
});

/** The migrate function and the trigger that runs it on deploy. */
export class DatabaseMigrations extends Construct {
  readonly migrateFunction: JobfenceFunction;
  readonly trigger: triggers.Trigger;

  constructor(scope: Construct, id: string, props: DatabaseMigrationsProps) {
    super(scope, id);
    const timeout = props.timeout ?? Duration.minutes(5);
    this.migrateFunction = new JobfenceFunction(this, "Migrate", {
      entry: "functions/migrate/handler.ts",
      description: "jobfence database migrations (run on deploy)",
      timeout,
      database: props.database,
      login: "migrator",
      // The migration sets read their SQL files beside their modules (see bundle-with-files.ts).
      bundleWithFiles: true,
    });
    if (props.provisionLogins ?? true) {
      const logins = Object.entries(LOGIN_ROLES).map(([login, memberOf]) => {
        const secret = props.database.secrets[login as keyof typeof LOGIN_ROLES];
        secret.grantRead(this.migrateFunction.function);
        return { secretArn: secret.secretArn, memberOf };
      });
      this.migrateFunction.function.addEnvironment(
        "JOBFENCE_LOGIN_SECRETS",
        Stack.of(this).toJsonString(logins),
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
