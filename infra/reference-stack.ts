/**
 * The reference stack: award-points (and every consumer of `functions/consumers.ts`), the
 * dead-letter API and its bulk-operations worker, TTL cleanup and escalation, ops alerting, and a
 * database — created (Aurora Serverless v2 behind an RDS Proxy in a new VPC) or imported —
 * migrated on deploy before any consumer starts. Every alarm goes to an SNS topic, and to
 * BetterStack too when it is configured (an optional target); one dashboard shows the deployment;
 * the consumers' worst-case database connections are checked against the declared budget.
 *
 * It is built from `jobfence/cdk` (./cdk.ts) only, the entry point a user's own app has: each
 * registry entry is mapped into a JobConsumer's props ({@link jobConsumerProps}). Where jobfence's
 * own migrate, doctor and backstop-drain functions need what only the registry knows (its
 * consumers' migration sets and schema descriptions, their definitions), the stack gives the
 * constructs this repository's reference entries ({@link REFERENCE_ENTRIES}). The constructs
 * acknowledge the cdk-nag AwsSolutions findings they carry by design, each on the one resource it
 * concerns, with the reason.
 */
import { join } from "node:path";
import { CfnOutput, Stack, type StackProps } from "aws-cdk-lib";
import * as ec2 from "aws-cdk-lib/aws-ec2";
import type * as events from "aws-cdk-lib/aws-events";
import * as lambda from "aws-cdk-lib/aws-lambda";
import * as logs from "aws-cdk-lib/aws-logs";
import * as secretsmanager from "aws-cdk-lib/aws-secretsmanager";
import type { Construct } from "constructs";
import { CONSUMERS, type ConsumerDeployment } from "../functions/consumers.ts";
import {
  EMAIL_PROVIDER_URL,
  emailProviderUrl,
  emailProviderUrlProblem,
} from "../functions/notify-user/email.ts";
import { assertConsumerRegistry, consumerPaths, REPOSITORY_ROOT } from "../functions/registry.ts";
import { ConfigurationError } from "../shared/errors/configuration.ts";
import {
  BulkOperationsWorker,
  DatabaseAccess,
  type DatabaseAccessProps,
  DatabaseMigrations,
  DeadLetterApi,
  Doctor,
  FenceCleanup,
  JobConsumer,
  type JobConsumerProps,
  JobfenceDashboard,
  type JobfenceFunction,
  OpsAlerting,
  ReferenceDatabase,
  validateConnectionBudget,
} from "./cdk.ts";

/**
 * This repository's own entry points of jobfence's functions, which add its registry's consumers
 * to the package's: the migrate function applies their migration sets, the doctor compares their
 * schemas, each backstop drain fingerprints with its consumer's definition.
 */
export const REFERENCE_ENTRIES = Object.freeze({
  migrate: join(REPOSITORY_ROOT, "functions/migrate/reference-handler.ts"),
  doctor: join(REPOSITORY_ROOT, "functions/doctor/reference-handler.ts"),
  backstopDrain: join(REPOSITORY_ROOT, "functions/backstop-drain/reference-handler.ts"),
});

/** An existing database, by identifiers (what CDK context can carry). */
export interface ExistingDatabase {
  readonly vpcId: string;
  readonly securityGroupId: string;
  /** The RDS Proxy or cluster endpoint. */
  readonly endpoint: string;
  /** @default 5432 */
  readonly port?: number;
  /** @default "jobfence" */
  readonly databaseName?: string;
  /**
   * Secret name or ARN per login: the migrator's, the ops and cleanup logins', and under
   * `consumers` one per deployed consumer, by consumer name (`{ "award-points": "…" }`).
   */
  readonly secrets: {
    readonly migrator: string;
    readonly ops: string;
    readonly cleanup: string;
    readonly consumers: Readonly<Record<string, string>>;
  };
  /**
   * Create or update the function logins from their secrets on deploy (the migrator needs
   * CREATEROLE). Set false where a DBA manages the users.
   * @default true
   */
  readonly provisionLogins?: boolean;
}

/** Props of {@link JobfenceStack}. */
export interface JobfenceStackProps extends StackProps {
  /** JWT issuer of the dead-letter API's tokens (https). */
  readonly jwtIssuer: string;
  /** JWT audience of the dead-letter API's tokens. */
  readonly jwtAudience: string;
  /** @default `${jwtIssuer}/.well-known/jwks.json` */
  readonly jwksUrl?: string;
  /**
   * Bulk replays and discards over more dead letters than this need their plan's token.
   * @default API_DEFAULTS.bulkConfirmAbove (100)
   */
  readonly bulkConfirmAbove?: number;
  /**
   * BetterStack's HTTPS endpoint for alerts: BetterStack is then a target of the dead-letter alerts
   * and of every alarm. Give it with {@link betterStackSecretName}, or neither.
   * @default none: the alarms notify the alarm topic only
   */
  readonly betterStackEndpoint?: string;
  /**
   * Name of the existing Secrets Manager secret holding BetterStack's header value.
   * @default none (with {@link betterStackEndpoint})
   */
  readonly betterStackSecretName?: string;
  /**
   * Where the ops bus's alerts (`DeadLetterRecorded`, `DeadLettersEscalated`) go besides BetterStack:
   * any EventBridge targets (an SNS topic, an API destination for PagerDuty or Opsgenie).
   * @default none
   */
  readonly alertTargets?: readonly events.IRuleTarget[];
  /**
   * Where every alarm's state changes are forwarded besides BetterStack.
   * @default none: the alarms notify the alarm topic only
   */
  readonly alarmTargets?: readonly events.IRuleTarget[];
  /**
   * E-mail addresses subscribed to the alarm topic, the channel every alarm notifies.
   * @default none (a synth warning; subscribe the `AlarmTopicArn` output some other way)
   */
  readonly alarmEmails?: readonly string[];
  /**
   * Database connections the consumers, their backstop drains and outbox relays may hold at once,
   * together (each invocation holds its pool's); the synth refuses consumers whose worst case
   * exceeds it.
   * Required when a consumer uses provisioned pollers.
   * @default not checked
   */
  readonly connectionBudget?: number;
  /** @default CONSUMERS (functions/consumers.ts) */
  readonly consumers?: readonly ConsumerDeployment[];
  /** An existing database to use. @default a new VPC with Aurora Serverless v2 and an RDS Proxy */
  readonly existingDatabase?: ExistingDatabase;
  /**
   * The base URL (http or https) of the email provider notify-user's step sends through: its
   * function's EMAIL_PROVIDER_URL. Required when notify-user is deployed.
   * @default none (refused when notify-user is deployed)
   */
  readonly emailProviderUrl?: string;
}

/** The consumer that sends emails through the provider at {@link JobfenceStackProps.emailProviderUrl}. */
const EMAIL_SENDER = "notify-user";

/** The whole deployment. */
export class JobfenceStack extends Stack {
  readonly database: DatabaseAccess;
  readonly referenceDatabase?: ReferenceDatabase;
  readonly alerting: OpsAlerting;
  readonly consumers: readonly JobConsumer[];
  readonly api: DeadLetterApi;
  /** Runs the chunks of the API's bulk replays and discards, every minute. */
  readonly bulkOperations: BulkOperationsWorker;
  readonly cleanup: FenceCleanup;
  /** Checks the database and the consumers' queues against what jobfence intends, daily. */
  readonly doctor: Doctor;
  readonly migrations: DatabaseMigrations;
  /**
   * Routes the state changes of every consumer, bulk-operations and cleanup alarm to BetterStack
   * and the alarm targets, when there are any.
   */
  readonly alarmForwarding?: events.Rule;
  /** The deployment's CloudWatch dashboard. */
  readonly dashboard: JobfenceDashboard;

  constructor(scope: Construct, id: string, props: JobfenceStackProps) {
    super(scope, id, props);
    const deployments = props.consumers ?? CONSUMERS;
    // Before anything is built from them: each consumer's folder, generated entry point and
    // migrations must be there (a missing entry would otherwise surface as esbuild's error).
    assertConsumerRegistry(deployments, "JobfenceStack");

    // Each consumer logs in as its own user: the database needs one login secret per consumer.
    const consumerNames = deployments.map((deployment) => deployment.definition.name);
    if (props.existingDatabase) {
      this.database = importDatabase(this, props.existingDatabase, consumerNames);
    } else {
      const vpc = new ec2.Vpc(this, "Vpc", {
        maxAzs: 2,
        natGateways: 1,
        subnetConfiguration: [
          { name: "public", subnetType: ec2.SubnetType.PUBLIC },
          { name: "functions", subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
          { name: "database", subnetType: ec2.SubnetType.PRIVATE_ISOLATED },
        ],
        flowLogs: {
          all: {
            destination: ec2.FlowLogDestination.toCloudWatchLogs(
              new logs.LogGroup(this, "VpcFlowLogs", { retention: logs.RetentionDays.ONE_MONTH }),
            ),
            trafficType: ec2.FlowLogTrafficType.REJECT,
          },
        },
      });
      this.referenceDatabase = new ReferenceDatabase(this, "Database", { vpc, consumers: consumerNames });
      this.database = this.referenceDatabase.access;
    }

    const { betterStackEndpoint, betterStackSecretName } = props;
    if ((betterStackEndpoint === undefined) !== (betterStackSecretName === undefined)) {
      throw new ConfigurationError("JobfenceStack", [
        "betterStackEndpoint and betterStackSecretName go together: give both to route alerts to BetterStack, or neither",
      ]);
    }
    this.alerting = new OpsAlerting(this, "Alerting", {
      ...(betterStackEndpoint && betterStackSecretName
        ? {
            betterStack: {
              endpoint: betterStackEndpoint,
              secret: secretsmanager.Secret.fromSecretNameV2(
                this,
                "BetterStackSecret",
                betterStackSecretName,
              ),
            },
          }
        : {}),
      ...(props.alertTargets ? { targets: props.alertTargets } : {}),
      ...(props.alarmTargets ? { alarmTargets: props.alarmTargets } : {}),
      ...(props.alarmEmails ? { alarmEmails: props.alarmEmails } : {}),
    });
    // notify-user's own setting: the email provider its step calls, given to its function alone.
    const emailProvider = consumerNames.includes(EMAIL_SENDER)
      ? emailProviderFor(props.emailProviderUrl)
      : undefined;
    // A sending consumer is given its follow-up targets' queues, so each target is created before
    // the consumers that send to it; the list keeps the registry's order.
    const created = new Map<string, JobConsumer>();
    for (const deployment of targetsFirst(deployments)) {
      const name = deployment.definition.name;
      // The registry check made every target a deployed consumer; a consumer's own queue is its own.
      const targets = Object.keys(deployment.definition.sends ?? {}).filter((target) => target !== name);
      const consumer = new JobConsumer(this, `Consumer-${name}`, {
        ...jobConsumerProps(deployment),
        database: this.database,
        opsBus: this.alerting.bus,
        ...(targets.length > 0
          ? {
              followUpTargets: Object.fromEntries(
                targets.map((target) => [target, (created.get(target) as JobConsumer).queue]),
              ),
            }
          : {}),
      });
      if (name === EMAIL_SENDER && emailProvider !== undefined) {
        consumer.consumerFunction.function.addEnvironment(EMAIL_PROVIDER_URL, emailProvider);
      }
      created.set(name, consumer);
    }
    this.consumers = deployments.map((deployment) => created.get(deployment.definition.name) as JobConsumer);
    this.api = new DeadLetterApi(this, "DeadLetterApi", {
      database: this.database,
      jwtIssuer: props.jwtIssuer,
      jwtAudience: props.jwtAudience,
      ...(props.jwksUrl ? { jwksUrl: props.jwksUrl } : {}),
      ...(props.bulkConfirmAbove !== undefined ? { bulkConfirmAbove: props.bulkConfirmAbove } : {}),
      consumerQueues: this.consumers.map((c) => c.queue),
    });
    this.bulkOperations = new BulkOperationsWorker(this, "BulkOperations", {
      database: this.database,
      consumerQueues: this.consumers.map((c) => c.queue),
    });
    this.cleanup = new FenceCleanup(this, "Cleanup", { database: this.database, opsBus: this.alerting.bus });
    this.doctor = new Doctor(this, "Doctor", {
      database: this.database,
      consumers: this.consumers,
      entry: REFERENCE_ENTRIES.doctor,
    });
    const budgetProblems = validateConnectionBudget(
      this.consumers.map((c) => c.connections),
      props.connectionBudget,
    );
    if (budgetProblems.length > 0) throw new ConfigurationError("JobfenceStack", budgetProblems);
    // Every alarm is a failure path: the alarm topic gets them all, and so does BetterStack when it
    // is configured (the alarm on undelivered alerts goes to the topic only).
    const alarms = [
      ...this.consumers.flatMap((c) => c.allAlarms),
      ...Object.values(this.bulkOperations.alarms),
      ...Object.values(this.cleanup.alarms),
      ...Object.values(this.doctor.alarms),
      ...Object.values(this.api.alarms),
    ];
    this.alarmForwarding = this.alerting.forwardAlarms("Alarms", alarms);
    this.alerting.notifyAlarmTopic(alarms);
    this.dashboard = new JobfenceDashboard(this, "Dashboard", {
      consumers: this.consumers,
      api: this.api,
      cleanup: this.cleanup,
      alarms: [...alarms, this.alerting.undeliveredAlarm],
    });
    this.migrations = new DatabaseMigrations(this, "Migrations", {
      database: this.database,
      provisionLogins: props.existingDatabase?.provisionLogins ?? true,
      consumers: this.consumers,
      entry: REFERENCE_ENTRIES.migrate,
      executeAfter: this.referenceDatabase ? [this.referenceDatabase] : [],
      // Only what starts work waits for the schema: the event source mappings, the schedules and
      // the API's stage. (Waiting with whole constructs would cycle through the security groups.)
      executeBefore: [
        ...[...this.consumers.flatMap((c) => [c.consumerFunction, c.drainFunction])].flatMap((fn) =>
          fn.function.node.children.filter((c) => c instanceof lambda.EventSourceMapping),
        ),
        ...this.consumers.flatMap((c) => (c.outbox ? [c.outbox.schedule] : [])),
        this.cleanup.cleanupSchedule,
        this.cleanup.escalationSchedule,
        this.bulkOperations.schedule,
        this.doctor.schedule,
        this.api.stage,
      ],
    });

    new CfnOutput(this, "ApiUrl", { value: this.api.url, description: "JOBFENCE_API_URL for the ops CLI" });
    new CfnOutput(this, "OpsBusName", { value: this.alerting.bus.eventBusName });
    new CfnOutput(this, "AlarmTopicArn", {
      value: this.alerting.alarmTopic.topicArn,
      description: "every alarm notifies this SNS topic too (subscribe it: docs/deploy.md)",
    });
    new CfnOutput(this, "DashboardName", { value: this.dashboard.dashboard.dashboardName });
    new CfnOutput(this, "SigningKeySecretArn", {
      value: this.api.signingKey.secretArn,
      description: "the secret holding the key that signs the API's cursors and plan tokens (rotate by hand)",
    });
    for (const consumer of this.consumers) {
      new CfnOutput(this, `QueueUrl-${consumer.node.id}`, {
        value: consumer.queue.queueUrl,
        description: `producers send ${consumer.node.id.replace(/^Consumer-/, "")} jobs here`,
      });
    }
  }

  /** Every function this stack deploys. */
  get functions(): JobfenceFunction[] {
    return [
      ...this.consumers.flatMap((c) => [
        c.consumerFunction,
        c.drainFunction,
        ...(c.outbox ? [c.outbox.relayFunction] : []),
      ]),
      this.api.handler,
      this.bulkOperations.workerFunction,
      this.cleanup.cleanupFunction,
      this.cleanup.escalationFunction,
      this.doctor.doctorFunction,
      this.migrations.migrateFunction,
    ];
  }
}

/** notify-user's email provider, checked as the consumer checks it: refused at synth when missing or not http(s). */
function emailProviderFor(url: string | undefined): string {
  const problem = emailProviderUrlProblem(url);
  if (problem !== undefined) {
    throw new ConfigurationError("JobfenceStack", [
      `emailProviderUrl (context jobfence:emailProviderUrl; notify-user's ${EMAIL_PROVIDER_URL}) ${problem}`,
    ]);
  }
  return emailProviderUrl({ [EMAIL_PROVIDER_URL]: url });
}

/**
 * The props of a registry entry's JobConsumer (without its database, bus and targets): its
 * generated entry point `functions/<name>/handler.ts`, its definition and its deployment settings,
 * what a user's own app gives for its consumer, and the reference backstop drain, which finds the
 * consumer's definition in the registry.
 */
export function jobConsumerProps(
  deployment: ConsumerDeployment,
): Omit<JobConsumerProps, "database" | "opsBus" | "followUpTargets"> {
  // The example and its seed are the conformance test's, not the deployment's.
  const { example: _example, exampleSeed: _exampleSeed, ...settings } = deployment;
  return {
    ...settings,
    entry: join(REPOSITORY_ROOT, consumerPaths(deployment.definition.name).entry),
    drainEntry: REFERENCE_ENTRIES.backstopDrain,
  };
}

/**
 * The deployments ordered so that every follow-up target comes before the consumers that send to
 * it, the registry's order otherwise. Consumers that send to one another in a cycle are refused,
 * each cycle named: each would need the other's queue first.
 */
function targetsFirst(deployments: readonly ConsumerDeployment[]): ConsumerDeployment[] {
  const byName = new Map(deployments.map((deployment) => [deployment.definition.name, deployment]));
  const state = new Map<string, "visiting" | "done">();
  const ordered: ConsumerDeployment[] = [];
  const problems: string[] = [];
  const visit = (deployment: ConsumerDeployment, path: readonly string[]): void => {
    const name = deployment.definition.name;
    if (state.get(name) === "done") return;
    if (state.get(name) === "visiting") {
      const cycle = [...path.slice(path.indexOf(name)), name];
      problems.push(
        `consumers ${cycle.join(" → ")} send follow-ups to one another in a cycle: a consumer is given its ` +
          "targets' queues when it is created, so every target is created before its senders; break the " +
          "cycle (a consumer may send to itself)",
      );
      return;
    }
    state.set(name, "visiting");
    for (const target of Object.keys(deployment.definition.sends ?? {})) {
      const sent = byName.get(target);
      if (sent && target !== name) visit(sent, [...path, name]);
    }
    state.set(name, "done");
    ordered.push(deployment);
  };
  for (const deployment of deployments) visit(deployment, []);
  if (problems.length > 0) throw new ConfigurationError("JobfenceStack", problems);
  return ordered;
}

/**
 * The imported database. Every deployed consumer needs its login's secret (and no secret may
 * name a consumer the stack does not deploy); every problem is reported together.
 */
function importDatabase(
  scope: Construct,
  existing: ExistingDatabase,
  consumers: readonly string[],
): DatabaseAccess {
  const problems: string[] = [];
  const given = existing.secrets as Partial<ExistingDatabase["secrets"]> & Record<string, unknown>;
  for (const login of ["migrator", "ops", "cleanup"] as const) {
    if (typeof given[login] !== "string" || given[login] === "") {
      problems.push(`secrets.${login} is required: the name or ARN of the ${login} login's secret`);
    }
  }
  const example = `{ "${consumers[0] ?? "award-points"}": "<secret name or ARN>" }`;
  if ("consumer" in given) {
    problems.push(
      `secrets.consumer is no longer used: each consumer logs in as its own user; give secrets.consumers instead, e.g. ${example}`,
    );
  }
  const byConsumer = given.consumers ?? {};
  if (typeof byConsumer !== "object" || byConsumer === null || Array.isArray(byConsumer)) {
    problems.push(`secrets.consumers must map each consumer's name to its login's secret, e.g. ${example}`);
  } else {
    for (const consumer of consumers) {
      if (typeof byConsumer[consumer] !== "string" || byConsumer[consumer] === "") {
        problems.push(
          `secrets.consumers["${consumer}"] is missing: add the name or ARN of the secret of consumer ${consumer}'s login (username and password)`,
        );
      }
    }
    for (const name of Object.keys(byConsumer)) {
      if (!consumers.includes(name)) {
        problems.push(
          `secrets.consumers["${name}"] names no consumer this stack deploys (${consumers.join(", ")}): remove it or correct the name`,
        );
      }
    }
  }
  if (problems.length > 0) throw new ConfigurationError("jobfence:existingDatabase", problems);

  const imported = (id: string, ref: string) =>
    ref.startsWith("arn:")
      ? secretsmanager.Secret.fromSecretCompleteArn(scope, id, ref)
      : secretsmanager.Secret.fromSecretNameV2(scope, id, ref);
  const { secrets } = existing;
  const props: DatabaseAccessProps = {
    vpc: ec2.Vpc.fromLookup(scope, "Vpc", { vpcId: existing.vpcId }),
    securityGroup: ec2.SecurityGroup.fromSecurityGroupId(scope, "DbSg", existing.securityGroupId),
    endpoint: existing.endpoint,
    ...(existing.port ? { port: existing.port } : {}),
    ...(existing.databaseName ? { databaseName: existing.databaseName } : {}),
    secrets: {
      migrator: imported("migratorDbSecret", secrets.migrator),
      ops: imported("opsDbSecret", secrets.ops),
      cleanup: imported("cleanupDbSecret", secrets.cleanup),
      consumers: Object.fromEntries(
        consumers.map((consumer) => [
          consumer,
          imported(`ConsumerDbSecret-${consumer}`, secrets.consumers[consumer] as string),
        ]),
      ),
    },
  };
  return DatabaseAccess.fromAttributes(props);
}

/** Reads the stack's props from CDK context (`-c jobfence:…`); every missing value is reported. */
export function stackPropsFromContext(
  get: (key: string) => unknown,
): Omit<JobfenceStackProps, keyof StackProps> {
  const problems: string[] = [];
  const text = (key: string, required: boolean): string | undefined => {
    const value = get(`jobfence:${key}`);
    if (value === undefined || value === "") {
      if (required) problems.push(`context jobfence:${key} is required`);
      return undefined;
    }
    if (typeof value !== "string") problems.push(`context jobfence:${key} must be a string`);
    return String(value);
  };
  const jwtIssuer = text("jwtIssuer", true);
  const jwtAudience = text("jwtAudience", true);
  const jwksUrl = text("jwksUrl", false);
  const confirmAbove = get("jobfence:bulkConfirmAbove");
  let bulkConfirmAbove: number | undefined;
  if (confirmAbove !== undefined && confirmAbove !== "") {
    // -c passes a string, cdk.json may hold a number; the construct checks the range.
    bulkConfirmAbove =
      typeof confirmAbove === "number"
        ? confirmAbove
        : typeof confirmAbove === "string" && /^\s*\d+\s*$/.test(confirmAbove)
          ? Number(confirmAbove)
          : Number.NaN;
    if (!Number.isInteger(bulkConfirmAbove)) {
      problems.push("context jobfence:bulkConfirmAbove must be a whole number");
    }
  }
  if (get("jobfence:dbCredentialsRevision") !== undefined) {
    problems.push(
      "context jobfence:dbCredentialsRevision is no longer used: the functions read their database credentials at run time, so a new password needs no deploy; remove it",
    );
  }
  const budget = get("jobfence:connectionBudget");
  let connectionBudget: number | undefined;
  if (budget !== undefined && budget !== "") {
    connectionBudget =
      typeof budget === "number"
        ? budget
        : typeof budget === "string" && /^\s*\d+\s*$/.test(budget)
          ? Number(budget)
          : Number.NaN;
    if (!Number.isInteger(connectionBudget) || connectionBudget < 1) {
      problems.push("context jobfence:connectionBudget must be a whole number of connections, at least 1");
    }
  }
  // -c passes one string (comma-separated addresses); cdk.json may hold a list.
  const emails = get("jobfence:alarmEmails");
  let alarmEmails: string[] | undefined;
  if (emails !== undefined && emails !== "") {
    if (typeof emails === "string") {
      alarmEmails = emails
        .split(",")
        .map((e) => e.trim())
        .filter((e) => e !== "");
    } else if (Array.isArray(emails) && emails.every((e) => typeof e === "string")) {
      alarmEmails = emails;
    } else {
      problems.push(
        "context jobfence:alarmEmails must be comma-separated e-mail addresses or a list of them",
      );
    }
  }
  // notify-user's email provider (the stack checks the URL).
  const emailProviderUrl = text("emailProviderUrl", true);
  const betterStackEndpoint = text("betterStackEndpoint", false);
  const betterStackSecretName = text("betterStackSecretName", false);
  if ((betterStackEndpoint === undefined) !== (betterStackSecretName === undefined)) {
    problems.push(
      "context jobfence:betterStackEndpoint and jobfence:betterStackSecretName go together: give both to route alerts to BetterStack, or neither",
    );
  }
  const existing = get("jobfence:existingDatabase");
  let existingDatabase: ExistingDatabase | undefined;
  if (existing !== undefined) {
    const parsed = typeof existing === "string" ? (JSON.parse(existing) as unknown) : existing;
    if (typeof parsed !== "object" || parsed === null) {
      problems.push("context jobfence:existingDatabase must be an object (docs/deploy.md)");
    } else {
      existingDatabase = parsed as ExistingDatabase;
      for (const key of ["vpcId", "securityGroupId", "endpoint", "secrets"] as const) {
        if (!existingDatabase[key]) problems.push(`context jobfence:existingDatabase.${key} is required`);
      }
      const provision: unknown = existingDatabase.provisionLogins;
      if (provision !== undefined && typeof provision !== "boolean") {
        problems.push("context jobfence:existingDatabase.provisionLogins must be true or false");
      }
    }
  }
  if (problems.length > 0) throw new ConfigurationError("jobfence CDK context", problems);
  return {
    jwtIssuer: jwtIssuer as string,
    jwtAudience: jwtAudience as string,
    ...(jwksUrl ? { jwksUrl } : {}),
    ...(bulkConfirmAbove !== undefined ? { bulkConfirmAbove } : {}),
    ...(betterStackEndpoint ? { betterStackEndpoint } : {}),
    ...(betterStackSecretName ? { betterStackSecretName } : {}),
    ...(existingDatabase ? { existingDatabase } : {}),
    ...(alarmEmails ? { alarmEmails } : {}),
    ...(connectionBudget !== undefined ? { connectionBudget } : {}),
    ...(emailProviderUrl ? { emailProviderUrl } : {}),
  };
}
