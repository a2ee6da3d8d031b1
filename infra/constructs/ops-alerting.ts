/**
 * The ops alerting path (docs/design.md §8): a dedicated ops EventBridge bus (never a domain bus)
 * that the harness, the backstop drains and escalation publish to, and a rule that forwards
 * `DeadLetterRecorded` and `DeadLettersEscalated` to the deployment's targets: any EventBridge
 * targets (an SNS topic, a Lambda function, an API destination for PagerDuty or Opsgenie), and
 * BetterStack, one optional target, through an EventBridge API destination whose credential lives
 * in Secrets Manager. Undeliverable alerts go to an encrypted queue; the dead letters themselves are
 * rows, so a lost alert never loses a failure.
 *
 * CloudWatch alarms (a dead letter recorded, a backstop filling, a queue falling behind, function
 * errors, the harness's failure metrics) go to {@link OpsAlerting.alarmTopic}, a KMS-encrypted,
 * TLS-only SNS topic the deployment subscribes to (e-mail addresses, or any subscription: PagerDuty's
 * and Opsgenie's CloudWatch integrations take an SNS topic): {@link OpsAlerting.notifyAlarmTopic}
 * sends an alarm's ALARM and OK transitions there. Alarms need no vendor. Where alarm targets or
 * BetterStack are given, {@link OpsAlerting.forwardAlarms} also routes the alarms' state changes,
 * which CloudWatch publishes on the account's default bus, to them; the alarm on undelivered alerts
 * goes to the topic only, since its forwarded copy could be undeliverable too.
 */
import { Annotations, Duration, RemovalPolicy, SecretValue, Stack, Validations } from "aws-cdk-lib";
import type * as cloudwatch from "aws-cdk-lib/aws-cloudwatch";
import * as cloudwatchActions from "aws-cdk-lib/aws-cloudwatch-actions";
import * as events from "aws-cdk-lib/aws-events";
import * as targets from "aws-cdk-lib/aws-events-targets";
import * as iam from "aws-cdk-lib/aws-iam";
import * as kms from "aws-cdk-lib/aws-kms";
import type * as secretsmanager from "aws-cdk-lib/aws-secretsmanager";
import * as sns from "aws-cdk-lib/aws-sns";
import * as subscriptions from "aws-cdk-lib/aws-sns-subscriptions";
import * as sqs from "aws-cdk-lib/aws-sqs";
import { Construct } from "constructs";
import { DEAD_LETTER_RECORDED, EVENT_SOURCE } from "../../shared/alerts/ops-bus.ts";
import { DEAD_LETTERS_ESCALATED } from "../../shared/dead-letters/escalation.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { ALERTING_DEFAULTS } from "../defaults.ts";
import { alarmFactory, alarmNamePrefix } from "./alarms.ts";

/** BetterStack as a target of the alerts and alarms (docs/deploy.md, BetterStack). */
export interface BetterStackProps {
  /** BetterStack's HTTPS endpoint that receives the alerts (an incoming webhook or HTTP source URL). */
  readonly endpoint: string;
  /**
   * The secret whose value is sent in {@link apiKeyHeader} (e.g. `Bearer <source token>`). Create it
   * before deploying (docs/deploy.md); it never appears in the template.
   */
  readonly secret: secretsmanager.ISecret;
  /**
   * The JSON field of the secret holding the header value.
   * @default the whole secret string
   */
  readonly secretField?: string;
  /** @default ALERTING_DEFAULTS.apiKeyHeader ("Authorization") */
  readonly apiKeyHeader?: string;
  /** @default ALERTING_DEFAULTS.rateLimitPerSecond */
  readonly rateLimitPerSecond?: number;
}

/** Props of {@link OpsAlerting}. */
export interface OpsAlertingProps {
  /**
   * The ops bus's name.
   * @default "jobfence-ops"
   */
  readonly busName?: string;
  /**
   * Where `DeadLetterRecorded` and `DeadLettersEscalated` go: any EventBridge targets (an SNS
   * topic, an SQS queue, a Lambda function, an API destination for PagerDuty's or Opsgenie's events
   * API). Give them {@link OpsAlerting.undeliveredAlerts} as their dead-letter queue where they take one.
   * @default none besides {@link betterStack}: the dead letters still alarm (JobConsumer's `deadLettered`)
   */
  readonly targets?: readonly events.IRuleTarget[];
  /**
   * Where the state changes of the alarms {@link OpsAlerting.forwardAlarms} is given go, as
   * CloudWatch publishes them ("CloudWatch Alarm State Change").
   * @default none besides {@link betterStack}: the alarms notify {@link OpsAlerting.alarmTopic}
   */
  readonly alarmTargets?: readonly events.IRuleTarget[];
  /**
   * BetterStack, a target of both the alerts and the alarms.
   * @default none
   */
  readonly betterStack?: BetterStackProps;
  /**
   * E-mail addresses subscribed to {@link OpsAlerting.alarmTopic} (each confirms by the link SNS
   * mails it).
   * @default none: the topic is created unsubscribed (a synth warning says so); subscribe it outside
   */
  readonly alarmEmails?: readonly string[];
}

/** BetterStack's connection and API destination, when it is a target. */
export interface BetterStackDestination {
  /** The connection (its credential is a Secrets Manager secret EventBridge manages). */
  readonly connection: events.Connection;
  /** The API destination. */
  readonly destination: events.ApiDestination;
}

/** The ops bus, its routes to the deployment's targets, and the alarm topic. */
export class OpsAlerting extends Construct {
  /** The ops bus: every jobfence alert is published here. */
  readonly bus: events.EventBus;
  /** BetterStack's connection and destination, when it is a target. */
  readonly betterStack?: BetterStackDestination;
  /**
   * Matches `DeadLetterRecorded` and `DeadLettersEscalated` from source "jobfence" and sends them
   * to the targets (more may be added: `rule.addTarget`).
   */
  readonly rule: events.Rule;
  /** Alerts EventBridge could not deliver after its retries. */
  readonly undeliveredAlerts: sqs.Queue;
  /** Fires when an alert could not be delivered; notifies {@link alarmTopic} only. */
  readonly undeliveredAlarm: cloudwatch.Alarm;
  /** The alarm channel every alarm notifies, vendor or none: SNS, KMS-encrypted, TLS-only. */
  readonly alarmTopic: sns.Topic;
  /** Where `DeadLetterRecorded` and `DeadLettersEscalated` go: BetterStack's destination and the given targets. */
  readonly alertTargets: readonly events.IRuleTarget[];
  /** Where {@link forwardAlarms} sends alarm state changes: BetterStack's destination and the given alarm targets. */
  readonly alarmTargets: readonly events.IRuleTarget[];
  /** The customer-managed key of {@link alarmTopic} (CloudWatch cannot publish with AWS's SNS key). */
  readonly alarmTopicKey: kms.Key;

  constructor(scope: Construct, id: string, props: OpsAlertingProps) {
    super(scope, id);
    const problems: string[] = [];
    const { betterStack } = props;
    if (betterStack && !/^https:\/\/[^\s/]+/.test(betterStack.endpoint)) {
      problems.push(`betterStack.endpoint must be an https:// URL, got "${betterStack.endpoint}"`);
    }
    const rate = betterStack?.rateLimitPerSecond ?? ALERTING_DEFAULTS.rateLimitPerSecond;
    if (!Number.isInteger(rate) || rate < 1 || rate > 300) {
      problems.push(`betterStack.rateLimitPerSecond must be 1–300, got ${rate}`);
    }
    for (const email of props.alarmEmails ?? []) {
      if (!/^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(email)) {
        problems.push(`alarmEmails: "${email}" is not an e-mail address`);
      }
    }
    if (problems.length > 0) throw new ConfigurationError("OpsAlerting", problems);

    this.bus = new events.EventBus(this, "Bus", { eventBusName: props.busName ?? "jobfence-ops" });
    this.undeliveredAlerts = new sqs.Queue(this, "Undelivered", {
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      retentionPeriod: Duration.days(14),
    });
    // This queue is the dead-letter queue of the rules' targets: it has none of its own.
    Validations.of(this.undeliveredAlerts).acknowledge({
      id: "AwsSolutions-SQS3",
      reason: "This queue is itself the dead-letter queue of the alert rule's targets.",
    });
    if (betterStack) {
      const connection = new events.Connection(this, "BetterStack", {
        description: "jobfence alerts to BetterStack",
        authorization: events.Authorization.apiKey(
          betterStack.apiKeyHeader ?? ALERTING_DEFAULTS.apiKeyHeader,
          betterStack.secretField
            ? SecretValue.secretsManager(betterStack.secret.secretArn, { jsonField: betterStack.secretField })
            : SecretValue.secretsManager(betterStack.secret.secretArn),
        ),
      });
      const destination = new events.ApiDestination(this, "Destination", {
        connection,
        endpoint: betterStack.endpoint,
        httpMethod: events.HttpMethod.POST,
        rateLimitPerSecond: rate,
        description: "BetterStack",
      });
      this.betterStack = { connection, destination };
    }
    this.alertTargets = [...this.vendorTargets(), ...(props.targets ?? [])];
    this.alarmTargets = [...this.vendorTargets(), ...(props.alarmTargets ?? [])];
    this.rule = new events.Rule(this, "Alerts", {
      eventBus: this.bus,
      description: "jobfence dead-letter alerts to the deployment's targets",
      eventPattern: { source: [EVENT_SOURCE], detailType: [DEAD_LETTER_RECORDED, DEAD_LETTERS_ESCALATED] },
      targets: [...this.alertTargets],
    });
    // Unnamed, so that the forwarding rule never forwards it: it says a forwarded copy may be lost.
    this.undeliveredAlarm = alarmFactory(this, { named: false })(
      "UndeliveredAlarm",
      this.undeliveredAlerts.metricApproximateNumberOfMessagesVisible({
        period: Duration.minutes(5),
        statistic: "Maximum",
      }),
      0,
      "jobfence alerts could not be delivered to a target (the dead letters are still recorded)",
    );

    this.alarmTopicKey = new kms.Key(this, "AlarmTopicKey", {
      description: "jobfence alarm topic",
      enableKeyRotation: true,
      // It encrypts notifications in flight only: nothing at rest needs it once the topic is gone.
      removalPolicy: RemovalPolicy.DESTROY,
    });
    // CloudWatch encrypts each notification for the topic itself, so it needs the key (AWS's
    // documented key policy for alarms on an encrypted topic).
    this.alarmTopicKey.addToResourcePolicy(
      new iam.PolicyStatement({
        principals: [new iam.ServicePrincipal("cloudwatch.amazonaws.com")],
        actions: ["kms:Decrypt", "kms:GenerateDataKey*"],
        resources: ["*"],
      }),
    );
    this.alarmTopic = new sns.Topic(this, "AlarmTopic", {
      displayName: "jobfence alarms",
      masterKey: this.alarmTopicKey,
      enforceSSL: true,
    });
    // enforceSSL gives the topic a policy of its own, which replaces SNS's default one: it must let
    // CloudWatch publish this account's alarms (any other publisher needs an IAM grant of its own).
    const { account, partition, region } = Stack.of(this);
    this.alarmTopic.addToResourcePolicy(
      new iam.PolicyStatement({
        principals: [new iam.ServicePrincipal("cloudwatch.amazonaws.com")],
        actions: ["sns:Publish"],
        resources: [this.alarmTopic.topicArn],
        conditions: {
          StringEquals: { "aws:SourceAccount": account },
          ArnLike: { "aws:SourceArn": `arn:${partition}:cloudwatch:${region}:${account}:alarm:*` },
        },
      }),
    );
    for (const email of props.alarmEmails ?? []) {
      this.alarmTopic.addSubscription(new subscriptions.EmailSubscription(email));
    }
    if ((props.alarmEmails ?? []).length === 0) {
      Annotations.of(this.alarmTopic).addWarningV2(
        "jobfence:alarm-topic-unsubscribed",
        "the alarm topic has no subscription: alarms reach only the forwarded targets, if any, until one is added (alarmEmails, docs/deploy.md)",
      );
    }
    this.notifyAlarmTopic([this.undeliveredAlarm]);
  }

  /**
   * Sends the ALARM and OK transitions of `alarms` to {@link alarmTopic}, the channel that needs no
   * vendor and works when a forwarded target does not.
   */
  notifyAlarmTopic(alarms: readonly cloudwatch.Alarm[]): void {
    const action = new cloudwatchActions.SnsAction(this.alarmTopic);
    for (const alarm of alarms) {
      alarm.addAlarmAction(action);
      alarm.addOkAction(action);
    }
  }

  /**
   * Forwards every state change (into ALARM and back to OK) of the stack's alarms named by
   * {@link alarmNameOf} to the alarm targets (BetterStack's and `alarmTargets`): `alarms` are
   * those, each checked to carry the name the rule matches. CloudWatch publishes the changes on the
   * default bus, so the rule lives there and matches the alarm names' prefix. Without alarm targets
   * nothing is forwarded (the alarm topic has them all) and no rule is made.
   */
  forwardAlarms(id: string, alarms: readonly cloudwatch.Alarm[]): events.Rule | undefined {
    const prefix = alarmNamePrefix(this);
    const problems = alarms.length === 0 ? ["no alarms to forward"] : [];
    for (const alarm of alarms) {
      const name = (alarm.node.defaultChild as cloudwatch.CfnAlarm).alarmName;
      if (typeof name !== "string" || !name.startsWith(prefix)) {
        problems.push(
          `${alarm.node.path} is not named by alarmNameOf (under "${prefix}"): the rule would miss it`,
        );
      }
    }
    if (problems.length > 0) throw new ConfigurationError("OpsAlerting.forwardAlarms", problems);
    if (this.alarmTargets.length === 0) return undefined;
    return new events.Rule(this, id, {
      description: "jobfence CloudWatch alarm state changes to the deployment's alarm targets",
      eventPattern: {
        source: ["aws.cloudwatch"],
        detailType: ["CloudWatch Alarm State Change"],
        detail: { alarmName: events.Match.prefix(prefix) },
      },
      targets: [...this.alarmTargets],
    });
  }

  /**
   * BetterStack's API destination as a rule target (a new one per rule), with retries and the
   * undelivered-alerts queue; none when BetterStack is not a target.
   */
  private vendorTargets(): events.IRuleTarget[] {
    if (!this.betterStack) return [];
    return [
      new targets.ApiDestination(this.betterStack.destination, {
        deadLetterQueue: this.undeliveredAlerts,
        maxEventAge: ALERTING_DEFAULTS.retryMaxEventAge,
        retryAttempts: ALERTING_DEFAULTS.retryAttempts,
      }),
    ];
  }
}
