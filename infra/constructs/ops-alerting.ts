/**
 * The ops alerting path (SPEC §8): a dedicated ops EventBridge bus (never a domain bus) that the
 * harness, the backstop drains and escalation publish to, and a rule that forwards
 * `DeadLetterRecorded` and `DeadLettersEscalated` to BetterStack through an EventBridge API
 * destination. The destination's credential lives in Secrets Manager: the operator stores it in a
 * secret, the Connection reads it by dynamic reference, and EventBridge keeps its own copy in a
 * Secrets Manager secret of the connection. Undeliverable alerts go to an encrypted queue; the
 * dead letters themselves are rows, so a lost alert never loses a failure.
 *
 * CloudWatch alarms (a backstop filling, a queue falling behind, function errors) reach BetterStack
 * the same way: {@link OpsAlerting.forwardAlarms} routes their state changes, which CloudWatch
 * publishes on the account's default bus, to the same destination.
 */
import { Duration, SecretValue } from "aws-cdk-lib";
import * as cloudwatch from "aws-cdk-lib/aws-cloudwatch";
import * as events from "aws-cdk-lib/aws-events";
import * as targets from "aws-cdk-lib/aws-events-targets";
import type * as secretsmanager from "aws-cdk-lib/aws-secretsmanager";
import * as sqs from "aws-cdk-lib/aws-sqs";
import { Construct } from "constructs";
import { DEAD_LETTER_RECORDED, EVENT_SOURCE } from "../../shared/alerts/ops-bus.ts";
import { DEAD_LETTERS_ESCALATED } from "../../shared/dead-letters/escalation.ts";
import { ConfigurationError } from "../../shared/errors.ts";
import { ALERTING_DEFAULTS } from "../defaults.ts";

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
  /** Fires when an alert could not be delivered. */
  readonly undeliveredAlarm: cloudwatch.Alarm;

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
    this.undeliveredAlarm = new cloudwatch.Alarm(this, "UndeliveredAlarm", {
      metric: this.undeliveredAlerts.metricApproximateNumberOfMessagesVisible({
        period: Duration.minutes(5),
        statistic: "Maximum",
      }),
      threshold: 0,
      evaluationPeriods: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      alarmDescription:
        "jobfence alerts could not be delivered to BetterStack (the dead letters are still recorded)",
    });
  }

  /**
   * Forwards every state change of `alarms` (into ALARM and back to OK) to BetterStack. CloudWatch
   * publishes those on the default bus, so the rule lives there and names the alarms by ARN.
   */
  forwardAlarms(id: string, alarms: readonly cloudwatch.IAlarm[]): events.Rule {
    if (alarms.length === 0)
      throw new ConfigurationError("OpsAlerting.forwardAlarms", ["no alarms to forward"]);
    return new events.Rule(this, id, {
      description: "jobfence CloudWatch alarm state changes to BetterStack",
      eventPattern: {
        source: ["aws.cloudwatch"],
        detailType: ["CloudWatch Alarm State Change"],
        resources: alarms.map((alarm) => alarm.alarmArn),
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
