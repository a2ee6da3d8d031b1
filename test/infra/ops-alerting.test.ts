/**
 * OpsAlerting: the ops bus, the alert rule and its targets (any EventBridge target, BetterStack's
 * API destination one optional target among them), and the alarm topic, the channel every alarm
 * notifies whatever the targets.
 */
import { Stack } from "aws-cdk-lib";
import { Annotations, Match, Template } from "aws-cdk-lib/assertions";
import * as cloudwatch from "aws-cdk-lib/aws-cloudwatch";
import type * as events from "aws-cdk-lib/aws-events";
import * as eventsTargets from "aws-cdk-lib/aws-events-targets";
import * as secretsmanager from "aws-cdk-lib/aws-secretsmanager";
import * as sns from "aws-cdk-lib/aws-sns";
import { Construct, type IConstruct } from "constructs";
import { beforeAll, describe, expect, it } from "vitest";
import { alarmNameOf, OpsAlerting } from "../../infra/cdk.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { logicalId, testApp } from "./support.ts";

let stack: Stack;
let alerting: OpsAlerting;
let secret: secretsmanager.Secret;
let template: Template;
let alarms: cloudwatch.Alarm[];

/** BetterStack's destination and connection of `alerting` (configured in the shared stack). */
function betterStackOf(of: OpsAlerting): {
  destination: events.ApiDestination;
  connection: events.Connection;
} {
  if (!of.betterStack) throw new Error("BetterStack is not configured");
  return of.betterStack;
}

beforeAll(() => {
  stack = new Stack(testApp(), "Alerting");
  secret = new secretsmanager.Secret(stack, "BetterStackToken");
  alerting = new OpsAlerting(stack, "Ops", {
    betterStack: { endpoint: "https://in.logs.betterstack.com", secret },
    alarmEmails: ["oncall@example.com", "ops-lead@example.com"],
  });
  const owner = new Construct(stack, "Owner");
  alarms = ["First", "Second"].map(
    (id) =>
      new cloudwatch.Alarm(owner, id, {
        alarmName: alarmNameOf(owner, id),
        metric: new cloudwatch.Metric({ namespace: "Test", metricName: id }),
        threshold: 0,
        evaluationPeriods: 1,
      }),
  );
  alerting.forwardAlarms("Forwarded", alarms);
  alerting.notifyAlarmTopic(alarms);
  template = Template.fromStack(stack);
});

describe("OpsAlerting", () => {
  it("creates a dedicated ops bus", () => {
    template.hasResourceProperties("AWS::Events::EventBus", { Name: "jobfence-ops" });
  });

  it("routes DeadLetterRecorded and DeadLettersEscalated from source jobfence to the API destination", () => {
    template.hasResourceProperties("AWS::Events::Rule", {
      EventBusName: { Ref: logicalId(stack, alerting.bus) },
      EventPattern: { source: ["jobfence"], "detail-type": ["DeadLetterRecorded", "DeadLettersEscalated"] },
      Targets: [
        Match.objectLike({
          Arn: { "Fn::GetAtt": [logicalId(stack, betterStackOf(alerting).destination), "Arn"] },
          DeadLetterConfig: { Arn: { "Fn::GetAtt": [logicalId(stack, alerting.undeliveredAlerts), "Arn"] } },
        }),
      ],
    });
  });

  it("posts to BetterStack with a credential read from Secrets Manager, never written in the template", () => {
    template.hasResourceProperties("AWS::Events::ApiDestination", {
      HttpMethod: "POST",
      InvocationEndpoint: "https://in.logs.betterstack.com",
      ConnectionArn: { "Fn::GetAtt": [logicalId(stack, betterStackOf(alerting).connection), "Arn"] },
    });
    const connection = Object.values(template.findResources("AWS::Events::Connection"))[0];
    expect(connection?.Properties.AuthorizationType).toBe("API_KEY");
    const value = JSON.stringify(connection?.Properties.AuthParameters.ApiKeyAuthParameters);
    expect(value).toContain('"ApiKeyName":"Authorization"');
    expect(value).toContain("{{resolve:secretsmanager:");
    expect(value).toContain(logicalId(stack, secret));
  });

  it("keeps undeliverable alerts in an encrypted, TLS-only queue and alarms on them", () => {
    template.hasResourceProperties("AWS::SQS::Queue", { SqsManagedSseEnabled: true });
    template.hasResourceProperties("AWS::SQS::QueuePolicy", {
      PolicyDocument: {
        Statement: Match.arrayWith([
          Match.objectLike({ Effect: "Deny", Condition: { Bool: { "aws:SecureTransport": "false" } } }),
        ]),
      },
    });
    template.hasResourceProperties("AWS::CloudWatch::Alarm", {
      MetricName: "ApproximateNumberOfMessagesVisible",
      Threshold: 0,
    });
  });

  it("forwards the state changes of the stack's named alarms from the default bus to the same destination", () => {
    const rules = template.findResources("AWS::Events::Rule", {
      Properties: { EventPattern: { source: ["aws.cloudwatch"] } },
    });
    const [rule] = Object.values(rules);
    expect(Object.keys(rules)).toHaveLength(1);
    // No EventBusName: CloudWatch publishes alarm state changes on the default bus.
    expect(rule?.Properties.EventBusName).toBeUndefined();
    // One prefix, not a list of ARNs: EventBridge patterns hold 2,048 characters.
    expect(rule?.Properties.EventPattern).toEqual({
      source: ["aws.cloudwatch"],
      "detail-type": ["CloudWatch Alarm State Change"],
      detail: { alarmName: [{ prefix: "Alerting/" }] },
    });
    template.hasResourceProperties("AWS::CloudWatch::Alarm", { AlarmName: "Alerting/Owner/First" });
    template.hasResourceProperties("AWS::CloudWatch::Alarm", { AlarmName: "Alerting/Owner/Second" });
    expect(rule?.Properties.Targets).toEqual([
      expect.objectContaining({
        Arn: { "Fn::GetAtt": [logicalId(stack, betterStackOf(alerting).destination), "Arn"] },
        DeadLetterConfig: { Arn: { "Fn::GetAtt": [logicalId(stack, alerting.undeliveredAlerts), "Arn"] } },
      }),
    ]);
    expect(() => alerting.forwardAlarms("Nothing", [])).toThrow(ConfigurationError);
    const unnamed = new cloudwatch.Alarm(stack, "Unnamed", {
      metric: new cloudwatch.Metric({ namespace: "Test", metricName: "Unnamed" }),
      threshold: 0,
      evaluationPeriods: 1,
    });
    expect(() => alerting.forwardAlarms("Missed", [unnamed])).toThrow(
      /Alerting\/Unnamed is not named by alarmNameOf/,
    );
  });

  it("has an alarm topic that does not depend on BetterStack: KMS-encrypted with a rotated key, TLS only", () => {
    template.hasResourceProperties("AWS::SNS::Topic", {
      KmsMasterKeyId: { "Fn::GetAtt": [logicalId(stack, alerting.alarmTopicKey), "Arn"] },
    });
    template.hasResourceProperties("AWS::KMS::Key", {
      EnableKeyRotation: true,
      KeyPolicy: {
        Statement: Match.arrayWith([
          Match.objectLike({
            Effect: "Allow",
            Principal: { Service: "cloudwatch.amazonaws.com" },
            Action: ["kms:Decrypt", "kms:GenerateDataKey*"],
          }),
        ]),
      },
    });
    template.hasResourceProperties("AWS::SNS::TopicPolicy", {
      Topics: [{ Ref: logicalId(stack, alerting.alarmTopic) }],
      PolicyDocument: {
        Statement: Match.arrayWith([
          Match.objectLike({ Effect: "Deny", Condition: { Bool: { "aws:SecureTransport": "false" } } }),
          Match.objectLike({
            Effect: "Allow",
            Principal: { Service: "cloudwatch.amazonaws.com" },
            Action: "sns:Publish",
            Condition: Match.objectLike({ StringEquals: { "aws:SourceAccount": { Ref: "AWS::AccountId" } } }),
          }),
        ]),
      },
    });
  });

  it("subscribes the given e-mail addresses to the alarm topic", () => {
    for (const email of ["oncall@example.com", "ops-lead@example.com"]) {
      template.hasResourceProperties("AWS::SNS::Subscription", {
        TopicArn: { Ref: logicalId(stack, alerting.alarmTopic) },
        Protocol: "email",
        Endpoint: email,
      });
    }
    expect(Object.keys(template.findResources("AWS::SNS::Subscription"))).toHaveLength(2);
    expect(Annotations.fromStack(stack).findWarning("*", Match.stringLikeRegexp("no subscription"))).toEqual(
      [],
    );
  });

  it("sends the undelivered-alerts alarm to the alarm topic only, and the notified alarms' ALARM and OK too", () => {
    const topic = { Ref: logicalId(stack, alerting.alarmTopic) };
    for (const alarm of [alerting.undeliveredAlarm, ...alarms]) {
      const props = template.toJSON().Resources[logicalId(stack, alarm)].Properties;
      expect(props.AlarmActions, alarm.node.path).toEqual([topic]);
      expect(props.OKActions, alarm.node.path).toEqual([topic]);
    }
    template.hasResourceProperties("AWS::CloudWatch::Alarm", {
      MetricName: "ApproximateNumberOfMessagesVisible",
      Dimensions: [
        {
          Name: "QueueName",
          Value: { "Fn::GetAtt": [logicalId(stack, alerting.undeliveredAlerts), "QueueName"] },
        },
      ],
      AlarmActions: [topic],
      TreatMissingData: "notBreaching",
    });
    // Not forwarded to BetterStack: its copy there would be as undeliverable as the alerts it counts.
    // It has CloudFormation's generated name, outside the prefix the forwarding rule matches.
    expect(
      template.toJSON().Resources[logicalId(stack, alerting.undeliveredAlarm)].Properties.AlarmName,
    ).toBeUndefined();
  });

  it("warns at synth when nobody is subscribed to the alarm topic, and refuses a malformed address", () => {
    const local = new Stack(testApp(), "Unsubscribed");
    new OpsAlerting(local, "Ops", {});
    expect(
      Annotations.fromStack(local).findWarning("*", Match.stringLikeRegexp("no subscription")),
    ).toHaveLength(1);
    expect(() => {
      const bad = new Stack(testApp(), "BadEmail");
      return new OpsAlerting(bad, "Ops", { alarmEmails: ["not-an-address"] });
    }).toThrow(/alarmEmails: "not-an-address" is not an e-mail address/);
  });

  it("refuses a non-HTTPS endpoint and a bad rate together", () => {
    const thunk = () => {
      const local = new Stack(testApp(), "Bad");
      return new OpsAlerting(local, "Ops", {
        betterStack: {
          endpoint: "http://example.com",
          secret: new secretsmanager.Secret(local, "S"),
          rateLimitPerSecond: 0,
        },
      });
    };
    expect(thunk).toThrow(ConfigurationError);
    expect(thunk).toThrow(/https:\/\/ URL[\s\S]*rateLimitPerSecond must be 1–300/);
  });
});

describe("OpsAlerting without a vendor", () => {
  it("needs no BetterStack: no connection, no destination, the alerts' rule made with no target", () => {
    const local = new Stack(testApp(), "NoVendor");
    const none = new OpsAlerting(local, "Ops", { alarmEmails: ["oncall@example.com"] });
    const owner = new Construct(local, "Owner");
    const alarm = new cloudwatch.Alarm(owner, "Only", {
      alarmName: alarmNameOf(owner, "Only"),
      metric: new cloudwatch.Metric({ namespace: "Test", metricName: "Only" }),
      threshold: 0,
      evaluationPeriods: 1,
    });
    // Nothing to forward to: the alarm topic has every alarm, and no rule is made for the default bus.
    expect(none.forwardAlarms("Alarms", [alarm])).toBeUndefined();
    const t = Template.fromStack(local);
    expect(none.betterStack).toBeUndefined();
    t.resourceCountIs("AWS::Events::Connection", 0);
    t.resourceCountIs("AWS::Events::ApiDestination", 0);
    t.resourceCountIs("AWS::Events::Rule", 1);
    const [rule] = Object.values(t.findResources("AWS::Events::Rule"));
    expect(rule?.Properties.Targets).toBeUndefined();
  });

  it("routes the alerts and the alarms' state changes to any EventBridge targets given, BetterStack beside them when configured", () => {
    const local = new Stack(testApp(), "AnyTarget");
    const pager = new sns.Topic(local, "Pager");
    const chat = new sns.Topic(local, "Chat");
    const routed = new OpsAlerting(local, "Ops", {
      targets: [new eventsTargets.SnsTopic(pager)],
      alarmTargets: [new eventsTargets.SnsTopic(chat)],
      betterStack: {
        endpoint: "https://in.logs.betterstack.com",
        secret: new secretsmanager.Secret(local, "S"),
      },
    });
    const owner = new Construct(local, "Owner");
    const alarm = new cloudwatch.Alarm(owner, "Only", {
      alarmName: alarmNameOf(owner, "Only"),
      metric: new cloudwatch.Metric({ namespace: "Test", metricName: "Only" }),
      threshold: 0,
      evaluationPeriods: 1,
    });
    const forwarding = routed.forwardAlarms("Alarms", [alarm]);
    const t = Template.fromStack(local);
    const targetsOf = (rule: IConstruct) =>
      (t.toJSON().Resources[logicalId(local, rule)].Properties.Targets as Array<{ Arn: unknown }>).map(
        (target) => target.Arn,
      );
    const destination = { "Fn::GetAtt": [logicalId(local, betterStackOf(routed).destination), "Arn"] };
    expect(targetsOf(routed.rule)).toEqual([destination, { Ref: logicalId(local, pager) }]);
    expect(forwarding).toBeDefined();
    expect(targetsOf(forwarding as events.Rule)).toEqual([destination, { Ref: logicalId(local, chat) }]);
  });
});
