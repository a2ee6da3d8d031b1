/** OpsAlerting (SPEC §8): the ops bus, the alert rule and the BetterStack API destination. */
import { Stack } from "aws-cdk-lib";
import { Match, Template } from "aws-cdk-lib/assertions";
import * as secretsmanager from "aws-cdk-lib/aws-secretsmanager";
import { beforeAll, describe, expect, it } from "vitest";
import { OpsAlerting } from "../../infra/constructs/ops-alerting.ts";
import { ConfigurationError } from "../../shared/errors.ts";
import { logicalId, testApp } from "./support.ts";

let stack: Stack;
let alerting: OpsAlerting;
let secret: secretsmanager.Secret;
let template: Template;

beforeAll(() => {
  stack = new Stack(testApp(), "Alerting");
  secret = new secretsmanager.Secret(stack, "BetterStackToken");
  alerting = new OpsAlerting(stack, "Ops", {
    betterStackEndpoint: "https://in.logs.betterstack.com",
    betterStackSecret: secret,
  });
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
