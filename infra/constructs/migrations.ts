/**
 * Migrations on deploy: a CDK Trigger invokes `functions/migrate` (as the migrator login) once per
 * deployment that changes it, after the database exists and before the consumers' event sources
 * are created, so no consumer takes a job against an old schema. It applies `core` (jobfence owns
 * nothing else), then creates or updates each consumer's login and the ops and cleanup logins
 * from their secrets, and registers what the consumers given declare: their replay queues, fence
 * TTLs and follow-up targets. A failed migration fails the deployment (and CloudFormation rolls
 * back).
 */
import { Duration, Stack } from "aws-cdk-lib";
import type * as secretsmanager from "aws-cdk-lib/aws-secretsmanager";
import type * as sqs from "aws-cdk-lib/aws-sqs";
import * as triggers from "aws-cdk-lib/triggers";
import { Construct, type IConstruct } from "constructs";
import { MIGRATE_ENV } from "../../functions/migrate/config.ts";
import type { SharedRole } from "../../shared/db/queries/provision-login.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import type { DatabaseAccess, SharedDatabaseLogin } from "./database.ts";
import { jobfenceEntry } from "./entries.ts";
import { JobConsumer } from "./job-consumer.ts";
import { JobfenceFunction } from "./jobfence-function.ts";

/** What the migrations read of each consumer: a JobConsumer gives it all. */
export type MigratedConsumer = Pick<
  JobConsumer,
  "consumerName" | "queue" | "fenceTtlSeconds" | "followUpTargets"
>;

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
   * The deployment's consumers, all of them. Registered on every run, each from its JobConsumer: its
   * source queue, the only queue a replay may send its dead letters to (migration 0014); its fence
   * TTL, from which the database decides when a copy of its job is `outlived` (migration 0021); and
   * its follow-up targets (its definition's `sends`), the only consumers its outbox may write to
   * (migration 0019; a target dropped from `sends` is revoked). Give this, or the older
   * {@link consumerQueues}; a consumer left out would have its replays unrestricted by queue.
   */
  readonly consumers?: readonly MigratedConsumer[];
  /**
   * Each consumer's source queue by name, instead of {@link consumers}: registers the queues only
   * (and {@link consumerFenceTtls}), no follow-up targets, so a consumer whose definition sends
   * follow-ups is refused here (give `consumers`).
   * @default none: give {@link consumers}
   */
  readonly consumerQueues?: Readonly<Record<string, sqs.IQueue>>;
  /**
   * Each consumer's fence TTL, with {@link consumerQueues}.
   * @default none registered: the database assumes the default TTL (21 days)
   */
  readonly consumerFenceTtls?: Readonly<Record<string, number>>;
  /**
   * The migrate function's entry point, an absolute path exporting `handler`: a deployment that has
   * jobfence run sets of its own besides `core` (this repository's reference deployment).
   * @default jobfence's own, which applies `core` only
   */
  readonly entry?: string;
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
    const registered = registeredConsumers(this, props);
    this.migrateFunction = new JobfenceFunction(this, "Migrate", {
      entry: props.entry ?? jobfenceEntry("migrate"),
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
    const fn = this.migrateFunction.function;
    const queues = Object.entries(registered.queues).sort(([a], [b]) => a.localeCompare(b));
    if (queues.length > 0) {
      fn.addEnvironment(
        MIGRATE_ENV.consumerQueues,
        Stack.of(this).toJsonString(
          Object.fromEntries(queues.map(([consumer, q]) => [consumer, [q.queueUrl]])),
        ),
      );
    }
    const ttls = Object.entries(registered.fenceTtls).sort(([a], [b]) => a.localeCompare(b));
    if (ttls.length > 0)
      fn.addEnvironment(MIGRATE_ENV.consumerFenceTtls, JSON.stringify(Object.fromEntries(ttls)));
    if (registered.followUpTargets) {
      const targets = Object.entries(registered.followUpTargets).sort(([a], [b]) => a.localeCompare(b));
      fn.addEnvironment(MIGRATE_ENV.followUpTargets, JSON.stringify(Object.fromEntries(targets)));
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

/** What the migrate function registers of the consumers, by consumer name. */
interface RegisteredConsumers {
  readonly queues: Readonly<Record<string, sqs.IQueue>>;
  readonly fenceTtls: Readonly<Record<string, number>>;
  /** Every consumer's, those sending nothing too; undefined registers (and revokes) none. */
  readonly followUpTargets?: Readonly<Record<string, readonly string[]>>;
}

/**
 * What the props register: from `consumers`, everything each JobConsumer declares; from the older
 * `consumerQueues`, the queues and TTLs only, refused when a JobConsumer of the stack behind one of
 * the queues sends follow-ups (its targets would go unregistered, its outbox refused by the
 * database).
 */
function registeredConsumers(scope: Construct, props: DatabaseMigrationsProps): RegisteredConsumers {
  const problems: string[] = [];
  if (props.consumers !== undefined) {
    if (props.consumerQueues !== undefined || props.consumerFenceTtls !== undefined) {
      problems.push(
        "give consumers, or consumerQueues (and consumerFenceTtls), not both: consumers registers their queues and fence TTLs itself",
      );
    }
    const names = props.consumers.map((c) => c.consumerName);
    const twice = names.filter((name, i) => names.indexOf(name) !== i);
    if (twice.length > 0) problems.push(`consumers: ${[...new Set(twice)].join(", ")} given more than once`);
    if (problems.length > 0) throw new ConfigurationError("DatabaseMigrations", problems);
    return {
      queues: Object.fromEntries(props.consumers.map((c) => [c.consumerName, c.queue])),
      fenceTtls: Object.fromEntries(props.consumers.map((c) => [c.consumerName, c.fenceTtlSeconds])),
      followUpTargets: Object.fromEntries(
        props.consumers.map((c) => [c.consumerName, [...c.followUpTargets]]),
      ),
    };
  }
  if (props.consumerQueues === undefined) {
    throw new ConfigurationError("DatabaseMigrations", [
      "consumers is required: every JobConsumer of the deployment, so their replay queues, fence TTLs and follow-up targets are registered",
    ]);
  }
  const given = new Set(Object.values(props.consumerQueues));
  const senders = Stack.of(scope)
    .node.findAll()
    .filter(
      (c): c is JobConsumer => c instanceof JobConsumer && given.has(c.queue) && c.followUpTargets.length > 0,
    );
  for (const sender of senders) {
    problems.push(
      `consumer "${sender.consumerName}" sends follow-ups (to ${sender.followUpTargets.join(", ")}), which consumerQueues ` +
        "cannot register: give consumers (every JobConsumer) instead of consumerQueues",
    );
  }
  if (problems.length > 0) throw new ConfigurationError("DatabaseMigrations", problems);
  return { queues: props.consumerQueues, fenceTtls: props.consumerFenceTtls ?? {} };
}
