/** OpsAlerting (SPEC §8): the ops bus, the alert rule and the BetterStack API destination. */
import { Stack } from "aws-cdk-lib";
import { Match, Template } from "aws-cdk-lib/assertions";
import * as cloudwatch from "aws-cdk-lib/aws-cloudwatch";
import * as secretsmanager from "aws-cdk-lib/aws-secretsmanager";
import { beforeAll, describe, expect, it } from "vitest";
import { OpsAlerting } from "../../infra/constructs/ops-alerting.ts";
import { ConfigurationError } from "../../shared/errors.ts";
import { logicalId, testApp } from "./support.ts";

let stack: Stack;
let alerting: OpsAlerting;
let secret: secretsmanager.Secret;
let template: Template;
let alarms: cloudwatch.Alarm[];

beforeAll(() => {
  stack = new Stack(testApp(), "Alerting");
  secret = new secretsmanager.Secret(stack, "BetterStackToken");
  alerting = new OpsAlerting(stack, "Ops", {
    betterStackEndpoint: "https://in.logs.betterstack.com",
    betterStackSecret: secret,
  });
  alarms = ["First", "Second"].map(
    (id) =>
      new cloudwatch.Alarm(stack, id, {
        metric: new cloudwatch.Metric({ namespace: "Test", metricName: id }),
        threshold: 0,
        evaluationPeriods: 1,
      }),
  );
  alerting.forwardAlarms("Forwarded", alarms);
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
          Arn: { "Fn::GetAtt": [logicalId(stack, alerting.destination), "Arn"] },
          DeadLetterConfig: { Arn: { "Fn::GetAtt": [logicalId(stack, alerting.undeliveredAlerts), "Arn"] } },
        }),
      ],
    });
  });

  it("posts to BetterStack with a credential read from Secrets Manager, never written in the template", () => {
    template.hasResourceProperties("AWS::Events::ApiDestination", {
      HttpMethod: "POST",
      InvocationEndpoint: "https://in.logs.betterstack.com",
      ConnectionArn: { "Fn::GetAtt": [logicalId(stack, alerting.connection), "Arn"] },
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

  it("forwards the given alarms' state changes from the default bus to the same destination", () => {
    const rules = template.findResources("AWS::Events::Rule", {
      Properties: { EventPattern: { source: ["aws.cloudwatch"] } },
    });
    const [rule] = Object.values(rules);
    expect(Object.keys(rules)).toHaveLength(1);
    // No EventBusName: CloudWatch publishes alarm state changes on the default bus.
    expect(rule?.Properties.EventBusName).toBeUndefined();
    expect(rule?.Properties.EventPattern).toEqual({
      source: ["aws.cloudwatch"],
      "detail-type": ["CloudWatch Alarm State Change"],
      resources: alarms.map((alarm) => ({ "Fn::GetAtt": [logicalId(stack, alarm), "Arn"] })),
    });
    expect(rule?.Properties.Targets).toEqual([
      expect.objectContaining({
        Arn: { "Fn::GetAtt": [logicalId(stack, alerting.destination), "Arn"] },
        DeadLetterConfig: { Arn: { "Fn::GetAtt": [logicalId(stack, alerting.undeliveredAlerts), "Arn"] } },
      }),
    ]);
    expect(() => alerting.forwardAlarms("Nothing", [])).toThrow(ConfigurationError);
  });

  it("refuses a non-HTTPS endpoint and a bad rate together", () => {
    const thunk = () => {
      const local = new Stack(testApp(), "Bad");
      return new OpsAlerting(local, "Ops", {
        betterStackEndpoint: "http://example.com",
        betterStackSecret: new secretsmanager.Secret(local, "S"),
        rateLimitPerSecond: 0,
      });
    };
    expect(thunk).toThrow(ConfigurationError);
    expect(thunk).toThrow(/https:\/\/ URL[\s\S]*rateLimitPerSecond must be 1–300/);
  });
});
