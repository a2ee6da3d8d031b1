/**
 * The ops alerting path (docs/design.md §8): a dedicated ops EventBridge bus (never a domain bus) that the
 * harness, the backstop drains and escalation publish to, and a rule that forwards
 * `DeadLetterRecorded` and `DeadLettersEscalated` to BetterStack through an EventBridge API
 * destination. The destination's credential lives in Secrets Manager: the operator stores it in a
 * secret, the Connection reads it by dynamic reference, and EventBridge keeps its own copy in a
 * Secrets Manager secret of the connection. Undeliverable alerts go to an encrypted queue; the
 * dead letters themselves are rows, so a lost alert never loses a failure.
 *
 * CloudWatch alarms (a backstop filling, a queue falling behind, function errors, the harness's
 * failure metrics) reach BetterStack the same way: {@link OpsAlerting.forwardAlarms} routes their
 * state changes, which CloudWatch publishes on the account's default bus, to the same destination.
 *
 * BetterStack may itself be what is broken, so every alarm also goes to a second channel that does
 * not depend on it: {@link OpsAlerting.alarmTopic}, a KMS-encrypted, TLS-only SNS topic the
 * deployment subscribes to (e-mail addresses, or any subscription added to the topic).
 * {@link OpsAlerting.notifyAlarmTopic} sends an alarm's ALARM and OK transitions there; the alarm on
 * undelivered alerts goes there only, since its BetterStack copy would be undeliverable too.
 */
import { Annotations, Duration, RemovalPolicy, SecretValue, Stack } from "aws-cdk-lib";
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

/** Props of {@link OpsAlerting}. */
export interface OpsAlertingProps {
  /**
   * The ops bus's name.
   * @default "jobfence-ops"
   */
  readonly busName?: string;
  /** BetterStack's HTTPS endpoint that receives the alerts (an incoming webhook or HTTP source URL). */
  readonly betterStackEndpoint: string;
  /**
   * The secret whose value is sent in {@link apiKeyHeader} (e.g. `Bearer <source token>`). Create it
   * before deploying (docs/deploy.md); it never appears in the template.
   */
  readonly betterStackSecret: secretsmanager.ISecret;
  /**
   * The JSON field of the secret holding the header value.
   * @default the whole secret string
   */
  readonly betterStackSecretField?: string;
  /** @default ALERTING_DEFAULTS.apiKeyHeader ("Authorization") */
  readonly apiKeyHeader?: string;
  /** @default ALERTING_DEFAULTS.rateLimitPerSecond */
  readonly rateLimitPerSecond?: number;
  /**
   * E-mail addresses subscribed to {@link OpsAlerting.alarmTopic} (each confirms by the link SNS
   * mails it).
   * @default none: the topic is created unsubscribed (a synth warning says so); subscribe it outside
   */
  readonly alarmEmails?: readonly string[];
}

/** The ops bus and its route to BetterStack. */
export class OpsAlerting extends Construct {
  /** The ops bus: every jobfence alert is published here. */
  readonly bus: events.EventBus;
  /** The BetterStack connection (its credential is a Secrets Manager secret EventBridge manages). */
  readonly connection: events.Connection;
  /** The API destination. */
  readonly destination: events.ApiDestination;
  /** Matches `DeadLetterRecorded` and `DeadLettersEscalated` from source "jobfence". */
  readonly rule: events.Rule;
  /** Alerts EventBridge could not deliver after its retries. */
  readonly undeliveredAlerts: sqs.Queue;
  /** Fires when an alert could not be delivered; notifies {@link alarmTopic} only. */
  readonly undeliveredAlarm: cloudwatch.Alarm;
  /** The alarm channel that does not depend on BetterStack: SNS, KMS-encrypted, TLS-only. */
  readonly alarmTopic: sns.Topic;
  /** The customer-managed key of {@link alarmTopic} (CloudWatch cannot publish with AWS's SNS key). */
  readonly alarmTopicKey: kms.Key;

  constructor(scope: Construct, id: string, props: OpsAlertingProps) {
    super(scope, id);
    const problems: string[] = [];
    if (!/^https:\/\/[^\s/]+/.test(props.betterStackEndpoint)) {
      problems.push(`betterStackEndpoint must be an https:// URL, got "${props.betterStackEndpoint}"`);
    }
    const rate = props.rateLimitPerSecond ?? ALERTING_DEFAULTS.rateLimitPerSecond;
    if (!Number.isInteger(rate) || rate < 1 || rate > 300) {
      problems.push(`rateLimitPerSecond must be 1–300, got ${rate}`);
    }
    for (const email of props.alarmEmails ?? []) {
      if (!/^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(email)) {
        problems.push(`alarmEmails: "${email}" is not an e-mail address`);
      }
    }
    if (problems.length > 0) throw new ConfigurationError("OpsAlerting", problems);

    this.bus = new events.EventBus(this, "Bus", { eventBusName: props.busName ?? "jobfence-ops" });
    this.connection = new events.Connection(this, "BetterStack", {
      description: "jobfence alerts to BetterStack",
      authorization: events.Authorization.apiKey(
        props.apiKeyHeader ?? ALERTING_DEFAULTS.apiKeyHeader,
        props.betterStackSecretField
          ? SecretValue.secretsManager(props.betterStackSecret.secretArn, {
              jsonField: props.betterStackSecretField,
            })
          : SecretValue.secretsManager(props.betterStackSecret.secretArn),
      ),
    });
    this.destination = new events.ApiDestination(this, "Destination", {
      connection: this.connection,
      endpoint: props.betterStackEndpoint,
      httpMethod: events.HttpMethod.POST,
      rateLimitPerSecond: rate,
      description: "BetterStack",
    });
    this.undeliveredAlerts = new sqs.Queue(this, "Undelivered", {
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      retentionPeriod: Duration.days(14),
    });
    this.rule = new events.Rule(this, "Alerts", {
      eventBus: this.bus,
      description: "jobfence dead-letter alerts to BetterStack",
      eventPattern: { source: [EVENT_SOURCE], detailType: [DEAD_LETTER_RECORDED, DEAD_LETTERS_ESCALATED] },
      targets: [this.betterStackTarget()],
    });
    // Unnamed, so that the forwarding rule never sends it to BetterStack: it says BetterStack fails.
    this.undeliveredAlarm = alarmFactory(this, { named: false })(
      "UndeliveredAlarm",
      this.undeliveredAlerts.metricApproximateNumberOfMessagesVisible({
        period: Duration.minutes(5),
        statistic: "Maximum",
      }),
      0,
      "jobfence alerts could not be delivered to BetterStack (the dead letters are still recorded)",
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
        "the alarm topic has no subscription: alarms reach BetterStack only until one is added (alarmEmails, docs/deploy.md)",
      );
    }
    this.notifyAlarmTopic([this.undeliveredAlarm]);
  }

  /**
   * Sends the ALARM and OK transitions of `alarms` to {@link alarmTopic}, the channel that works
   * when BetterStack does not.
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
   * {@link alarmNameOf} to BetterStack: `alarms` are those, each checked to carry the name the
   * rule matches. CloudWatch publishes the changes on the default bus, so the rule lives there and
   * matches the alarm names' prefix.
   */
  forwardAlarms(id: string, alarms: readonly cloudwatch.Alarm[]): events.Rule {
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
    return new events.Rule(this, id, {
      description: "jobfence CloudWatch alarm state changes to BetterStack",
      eventPattern: {
        source: ["aws.cloudwatch"],
        detailType: ["CloudWatch Alarm State Change"],
        detail: { alarmName: events.Match.prefix(prefix) },
      },
      targets: [this.betterStackTarget()],
    });
  }

  /** The API destination as a rule target, with retries and the undelivered-alerts queue. */
  private betterStackTarget(): targets.ApiDestination {
    return new targets.ApiDestination(this.destination, {
      deadLetterQueue: this.undeliveredAlerts,
      maxEventAge: ALERTING_DEFAULTS.retryMaxEventAge,
      retryAttempts: ALERTING_DEFAULTS.retryAttempts,
    });
  }
}
