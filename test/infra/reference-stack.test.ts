/**
 * The reference stack: cdk-nag AwsSolutions leaves zero unacknowledged findings, each
 * acknowledgement is scoped to one resource and finding with a reason, migrations run before the
 * consumers start, and the bundles — the run's one synthesis with real esbuild bundling
 * (test/support/synthesized-stack.ts) — are ESM `.mjs`.
 */
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { Stack } from "aws-cdk-lib";
import { Template } from "aws-cdk-lib/assertions";
import * as eventsTargets from "aws-cdk-lib/aws-events-targets";
import * as sns from "aws-cdk-lib/aws-sns";
import { AwsSolutionsChecks } from "cdk-nag";
import type { IConstruct } from "constructs";
import { beforeAll, describe, expect, it } from "vitest";
import { CONSUMERS, type ConsumerDeployment } from "../../functions/consumers.ts";
import { CLEANUP_METRIC } from "../../functions/fence-cleanup/cleanup.ts";
import { JobfenceStack, stackPropsFromContext } from "../../infra/reference-stack.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import {
  REFERENCE_STACK_ID,
  REFERENCE_STACK_PROPS,
  type SynthesizedStack,
  synthesizedReferenceStack,
} from "../support/synthesized-stack.ts";
import { logicalId, testApp } from "./support.ts";

let stack: JobfenceStack;
let template: Template;

beforeAll(() => {
  // The construct tree, unbundled (cheap); the bundles are the run's shared synthesis.
  stack = new JobfenceStack(testApp(), REFERENCE_STACK_ID, REFERENCE_STACK_PROPS);
  template = Template.fromStack(stack);
});

describe("reference stack", () => {
  it("has zero unacknowledged cdk-nag AwsSolutions findings", () => {
    const report = new AwsSolutionsChecks().validateScope(stack);
    expect(
      report.violations.map(
        (v) => `${v.ruleName}: ${v.violatingResources.map((r) => r.constructPath).join(", ")}`,
      ),
    ).toEqual([]);
    expect(report.success).toBe(true);
  });

  it("scopes every acknowledgement to one resource, one finding and a reason", () => {
    const acknowledgements: Array<{ path: string; id: string; reason: string }> = [];
    const visit = (node: IConstruct) => {
      for (const entry of node.node.metadata) {
        if (entry.type === "aws:cdk:acknowledged-rules") {
          for (const [id, reason] of Object.entries(entry.data as Record<string, string>)) {
            // aws-cdk-lib acknowledges its own CloudFormation-Validate warnings; only ours are checked.
            if (!id.includes("AwsSolutions-")) continue;
            acknowledgements.push({ path: node.node.path, id, reason });
          }
        }
      }
      for (const child of node.node.children) visit(child);
    };
    visit(stack);
    expect(acknowledgements.length).toBeGreaterThan(0);
    if (process.env.JOBFENCE_PRINT_ACKS) console.log(acknowledgements);
    for (const ack of acknowledgements) {
      expect(ack.path, ack.id).not.toBe(stack.node.path);
      expect(ack.id).toMatch(/^(Annotation::)?AwsSolutions-[A-Z]+\d+(\[.+\])?$/);
      expect(ack.reason.length, `${ack.path} ${ack.id}`).toBeGreaterThan(30);
    }
  });

  it("grants a wildcard resource only for X-Ray (the acknowledged IAM5 finding hides nothing else)", () => {
    const statements = Object.values(template.findResources("AWS::IAM::Policy")).flatMap(
      (p) => p.Properties.PolicyDocument.Statement,
    );
    const wildcard = statements.filter((s) => [s.Resource].flat().includes("*"));
    expect(wildcard.length).toBeGreaterThan(0);
    for (const s of wildcard) {
      for (const action of [s.Action].flat()) expect(action, JSON.stringify(s)).toMatch(/^xray:/);
    }
  });

  it("deploys award-points with its queue, backstop and drain", () => {
    template.hasResourceProperties("AWS::SQS::Queue", { QueueName: "award-points", VisibilityTimeout: 180 });
    template.hasResourceProperties("AWS::SQS::Queue", {
      QueueName: "award-points-backstop",
      MessageRetentionPeriod: 1_209_600,
    });
  });

  it("creates Aurora Serverless v2 behind an RDS Proxy that requires TLS; functions connect through the proxy", () => {
    template.hasResourceProperties("AWS::RDS::DBCluster", {
      Engine: "aurora-postgresql",
      StorageEncrypted: true,
      ServerlessV2ScalingConfiguration: { MinCapacity: 0.5, MaxCapacity: 4 },
    });
    template.hasResourceProperties("AWS::RDS::DBInstance", { DBInstanceClass: "db.serverless" });
    template.hasResourceProperties("AWS::RDS::DBProxy", { RequireTLS: true, EngineFamily: "POSTGRESQL" });
    const proxy = stack.referenceDatabase?.proxy as IConstruct;
    const fn = Object.values(
      template.findResources("AWS::Lambda::Function", {
        Properties: { Description: "jobfence consumer award-points" },
      }),
    )[0];
    expect(fn?.Properties.Environment.Variables.JOBFENCE_DB_HOST).toEqual({
      "Fn::GetAtt": [logicalId(stack, proxy), "Endpoint"],
    });
  });

  it("migrates on deploy before any consumer's event source exists", () => {
    const triggers = template.findResources("Custom::Trigger");
    const [triggerId] = Object.keys(triggers);
    expect(triggerId).toBeDefined();
    const mappings = template.findResources("AWS::Lambda::EventSourceMapping");
    expect(Object.keys(mappings).length).toBeGreaterThan(0);
    for (const mapping of Object.values(mappings)) expect(mapping.DependsOn).toContain(triggerId);
  });
  it("registers each consumer's source queue as the only one its dead letters are replayed to", () => {
    const fnId = logicalId(stack, stack.migrations.migrateFunction.function);
    const fn = template.toJSON().Resources[fnId];
    const rendered = JSON.stringify(fn.Properties.Environment.Variables.JOBFENCE_CONSUMER_QUEUES);
    expect(stack.consumers.length).toBeGreaterThan(0);
    for (const consumer of stack.consumers) {
      expect(rendered).toContain(`\\"${consumer.consumerName}\\":[\\"`);
      expect(rendered).toContain(JSON.stringify({ Ref: logicalId(stack, consumer.queue) }));
    }
  });
  it("registers each consumer's fence TTL, by which the database judges a copy's age (migration 0021)", () => {
    const fnId = logicalId(stack, stack.migrations.migrateFunction.function);
    const fn = template.toJSON().Resources[fnId];
    const ttls = JSON.parse(fn.Properties.Environment.Variables.JOBFENCE_CONSUMER_FENCE_TTLS);
    expect(ttls).toEqual(Object.fromEntries(stack.consumers.map((c) => [c.consumerName, 21 * 86_400])));
  });
  it("creates each function's login from its secret on deploy: the migrate function reads those secrets only", () => {
    const database = stack.referenceDatabase;
    expect(database).toBeDefined();
    const secrets = database?.secrets;
    if (!secrets) return;
    const fnId = logicalId(stack, stack.migrations.migrateFunction.function);
    const fn = template.toJSON().Resources[fnId];
    const logins = fn.Properties.Environment.Variables.JOBFENCE_LOGIN_SECRETS;
    // Stack.toJsonString renders as an Fn::Join; the parts name each secret by Ref, role by text.
    const rendered = JSON.stringify(logins);
    for (const [secret, role] of [
      [secrets.consumers["award-points"], '\\"consumer\\":\\"award-points\\"'],
      [secrets.ops, '\\"memberOf\\":\\"jobfence_ops\\"'],
      [secrets.cleanup, '\\"memberOf\\":\\"jobfence_cleanup\\"'],
    ] as const) {
      expect(rendered).toContain(JSON.stringify({ Ref: logicalId(stack, secret as IConstruct) }));
      expect(rendered).toContain(role);
    }
    // No login is granted the consumers' base role itself any more.
    expect(rendered).not.toContain('\\"memberOf\\":\\"jobfence_consumer\\"');
    // Its role may read the function logins' secrets and its own, and no other secret.
    const readable = new Set<string>();
    for (const policy of Object.values(template.findResources("AWS::IAM::Policy"))) {
      if (
        !JSON.stringify(policy.Properties.Roles).includes(JSON.stringify(fn.Properties.Role["Fn::GetAtt"][0]))
      )
        continue;
      for (const statement of policy.Properties.PolicyDocument.Statement) {
        if ([statement.Action].flat().includes("secretsmanager:GetSecretValue")) {
          readable.add(JSON.stringify(statement.Resource));
        }
      }
    }
    expect([...readable].sort()).toEqual(
      [secrets.migrator, secrets.ops, secrets.cleanup, ...Object.values(secrets.consumers)]
        .map((secret) => JSON.stringify({ Ref: logicalId(stack, secret) }))
        .sort(),
    );
  });
});

describe("alarms", () => {
  const forwardedAlarms = () => [
    ...stack.consumers.flatMap((c) => [...Object.values(c.alarms), ...Object.values(c.outbox?.alarms ?? {})]),
    ...Object.values(stack.bulkOperations.alarms),
    ...Object.values(stack.cleanup.alarms),
    ...Object.values(stack.doctor.alarms),
    ...Object.values(stack.api.alarms),
  ];

  it("every consumer, bulk-operations, cleanup, doctor and API alarm reaches BetterStack through the alerting destination", () => {
    expect(stack.alarmForwarding).toBeDefined();
    const rule =
      template.toJSON().Resources[logicalId(stack, stack.alarmForwarding as IConstruct)].Properties;
    expect(rule.EventPattern.detail).toEqual({ alarmName: [{ prefix: "Jobfence/" }] });
    const alarms = forwardedAlarms();
    // 15 per consumer, 5 more per outbox relay (award-points' only), bulk operations, cleanup, doctor, API.
    const relays = stack.consumers.filter((c) => c.outbox).length;
    expect(relays).toBe(1);
    expect(alarms.length).toBe(15 * stack.consumers.length + 5 * relays + 2 + 2 + 2 + 1);
    for (const alarm of alarms) {
      const name = template.toJSON().Resources[logicalId(stack, alarm)].Properties.AlarmName;
      expect(name, alarm.node.path).toBe(alarm.node.path);
      expect(name.startsWith("Jobfence/")).toBe(true);
    }
    // The pattern stays one prefix however many alarms there are (EventBridge allows 2,048 characters).
    expect(JSON.stringify(rule.EventPattern).length).toBeLessThan(200);
  });

  it("every alarm of the stack, the undelivered-alerts one included, notifies the alarm topic on ALARM and OK", () => {
    const topic = { Ref: logicalId(stack, stack.alerting.alarmTopic) };
    const alarms = Object.entries(template.findResources("AWS::CloudWatch::Alarm"));
    expect(alarms.length).toBe(forwardedAlarms().length + 1);
    for (const [id, alarm] of alarms) {
      expect(alarm.Properties.AlarmActions, id).toEqual([topic]);
      expect(alarm.Properties.OKActions, id).toEqual([topic]);
      expect(alarm.Properties.TreatMissingData, id).toBe("notBreaching");
    }
    template.hasResourceProperties("AWS::SNS::Topic", {
      KmsMasterKeyId: { "Fn::GetAtt": [logicalId(stack, stack.alerting.alarmTopicKey), "Arn"] },
    });
    template.hasResourceProperties("AWS::SNS::Subscription", {
      TopicArn: topic,
      Protocol: "email",
      Endpoint: "oncall@example.com",
    });
    template.hasOutput("AlarmTopicArn", { Value: topic });
  });
});

describe("alerting without a vendor", () => {
  let plain: JobfenceStack;
  let plainTemplate: Template;
  beforeAll(() => {
    const {
      betterStackEndpoint: _endpoint,
      betterStackSecretName: _secret,
      ...withoutVendor
    } = REFERENCE_STACK_PROPS;
    plain = new JobfenceStack(testApp(), "NoVendor", withoutVendor);
    plainTemplate = Template.fromStack(plain);
  });

  it("synthesizes with no BetterStack settings, cdk-nag clean, with no connection, destination or forwarding rule", () => {
    expect(new AwsSolutionsChecks().validateScope(plain).violations.map((v) => v.ruleName)).toEqual([]);
    expect(plain.alerting.betterStack).toBeUndefined();
    expect(plain.alarmForwarding).toBeUndefined();
    plainTemplate.resourceCountIs("AWS::Events::Connection", 0);
    plainTemplate.resourceCountIs("AWS::Events::ApiDestination", 0);
    expect(
      Object.values(plainTemplate.findResources("AWS::Events::Rule")).filter(
        (r) => r.Properties.EventPattern?.source?.[0] === "aws.cloudwatch",
      ),
    ).toEqual([]);
  });

  it("still alarms on every consumer's dead letters, and every alarm notifies the alarm topic", () => {
    const topic = { Ref: logicalId(plain, plain.alerting.alarmTopic) };
    for (const consumer of plain.consumers) {
      const alarm = plainTemplate.toJSON().Resources[logicalId(plain, consumer.alarms.deadLettered)];
      expect(alarm.Properties.AlarmName).toBe(`NoVendor/${consumer.node.id}/DeadLetteredAlarm`);
    }
    const alarms = Object.entries(plainTemplate.findResources("AWS::CloudWatch::Alarm"));
    expect(alarms.length).toBe(Object.keys(template.findResources("AWS::CloudWatch::Alarm")).length);
    for (const [id, alarm] of alarms) expect(alarm.Properties.AlarmActions, id).toEqual([topic]);
  });

  it("with BetterStack settings, routes the dead-letter alerts to it as before", () => {
    const destination = stack.alerting.betterStack?.destination as IConstruct;
    const rule = template.toJSON().Resources[logicalId(stack, stack.alerting.rule)].Properties;
    expect(rule.Targets.map((t: { Arn: unknown }) => t.Arn)).toEqual([
      { "Fn::GetAtt": [logicalId(stack, destination), "Arn"] },
    ]);
  });

  it("routes the alerts and the alarms to any targets it is given, no vendor needed", () => {
    const app = testApp();
    const targetStack = new Stack(app, "Targets");
    const pager = new sns.Topic(targetStack, "Pager");
    const routed = new JobfenceStack(app, "Routed", {
      ...REFERENCE_STACK_PROPS,
      betterStackEndpoint: undefined,
      betterStackSecretName: undefined,
      alertTargets: [new eventsTargets.SnsTopic(pager)],
      alarmTargets: [new eventsTargets.SnsTopic(pager)],
    });
    const t = Template.fromStack(routed);
    const targetsOf = (rule: IConstruct) =>
      t.toJSON().Resources[logicalId(routed, rule)].Properties.Targets.map((x: { Arn: unknown }) => x.Arn);
    expect(targetsOf(routed.alerting.rule)).toHaveLength(1);
    expect(routed.alarmForwarding).toBeDefined();
    expect(targetsOf(routed.alarmForwarding as IConstruct)).toHaveLength(1);
    t.resourceCountIs("AWS::Events::ApiDestination", 0);
  });

  it("refuses BetterStack's endpoint without its secret, and the reverse", () => {
    const { betterStackSecretName: _secret, ...endpointOnly } = REFERENCE_STACK_PROPS;
    expect(() => new JobfenceStack(testApp(), "Half", endpointOnly)).toThrow(
      /betterStackEndpoint and betterStackSecretName go together/,
    );
  });
});

describe("dashboard", () => {
  /** The dashboard's body as JSON, each CloudFormation reference in it written as `<…>`. */
  function dashboardBody(): {
    widgets: Array<{ type: string; properties: { metrics?: unknown[][]; alarms?: unknown[] } }>;
  } {
    const dashboards = Object.values(template.findResources("AWS::CloudWatch::Dashboard"));
    expect(dashboards).toHaveLength(1);
    const body = dashboards[0]?.Properties.DashboardBody;
    const parts: unknown[] = body["Fn::Join"]?.[1] ?? [body];
    return JSON.parse(
      parts.map((p) => (typeof p === "string" ? p : `<${JSON.stringify(p).replace(/"/g, "'")}>`)).join(""),
    );
  }

  /** `namespace metric dimension=value …` of every metric the dashboard graphs. */
  function graphedMetrics(): string[] {
    return dashboardBody().widgets.flatMap((w) =>
      (w.properties.metrics ?? []).map((m) => {
        const [namespace, name, ...rest] = m.filter((x) => typeof x === "string") as string[];
        const dims: string[] = [];
        for (let i = 0; i + 1 < rest.length; i += 2) dims.push(`${rest[i]}=${rest[i + 1]}`);
        return [namespace, name, ...dims].join(" ");
      }),
    );
  }

  it("is one dashboard named after the stack", () => {
    template.hasResourceProperties("AWS::CloudWatch::Dashboard", { DashboardName: "Jobfence" });
    template.hasOutput("DashboardName", {});
  });

  it("graphs each consumer's outcomes, dead letters by kind, fence latency and failures, as the harness and drain emit them", () => {
    const graphed = graphedMetrics();
    for (const name of [
      "JobSucceeded",
      "JobDuplicate",
      "JobConflict",
      "JobRetried",
      "DeadLetteredPoison",
      "DeadLetteredHard",
      "DeadLetteredExhausted",
      "DeadLetteredConflict",
      "DeadLetteredInterrupted",
      "FenceLatency",
      "DeadLetterWriteFailed",
      "AlertFailed",
      "RecordFailed",
      "RetryScheduleFailed",
      "FailureUnrecorded",
      "RecordInterrupted",
    ]) {
      expect(graphed, name).toContain(`jobfence ${name} service=award-points`);
    }
    for (const name of ["DeadLetteredUnrecorded", "BackstopRecordFailed", "AlertFailed"]) {
      expect(graphed, name).toContain(`jobfence ${name} service=award-points-backstop`);
    }
    const dashboard = JSON.stringify(dashboardBody());
    expect(dashboard).toContain('"stat":"p99"');
  });

  it("graphs a sending consumer's follow-ups and outbox, as the consumer and its relay emit them, and no one else's", () => {
    const graphed = graphedMetrics();
    for (const name of ["FollowUpsSent", "FollowUpRelayFailed"]) {
      expect(graphed, name).toContain(`jobfence ${name} service=award-points`);
    }
    for (const name of [
      "OutboxSent",
      "OutboxRetried",
      "OutboxUndelivered",
      "OutboxRelayFailed",
      "AlertFailed",
      "OutboxRows",
      "OutboxOldestAgeSeconds",
    ]) {
      expect(graphed, name).toContain(`jobfence ${name} service=award-points-outbox`);
    }
    expect(graphed.filter((m) => m.includes("service=notify-user-outbox"))).toEqual([]);
    // The relay writes undelivered dead letters, never the consumer: its row graphs none.
    expect(graphed.filter((m) => m.includes("DeadLetteredUndelivered"))).toEqual([]);
  });

  it("graphs each consumer's source queue and backstop: depth, in flight and age", () => {
    const graphed = graphedMetrics();
    const [consumer] = stack.consumers;
    for (const queue of [consumer?.queue, consumer?.backstopQueue]) {
      const queueName = `QueueName=<{'Fn::GetAtt':['${logicalId(stack, queue as IConstruct)}','QueueName']}>`;
      for (const metric of [
        "ApproximateNumberOfMessagesVisible",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateAgeOfOldestMessage",
      ]) {
        expect(graphed).toContain(`AWS/SQS ${metric} ${queueName}`);
      }
    }
  });

  it("graphs every metric of TTL cleanup, and the API's requests, 4xx, 5xx and latency", () => {
    const graphed = graphedMetrics();
    expect(Object.values(CLEANUP_METRIC)).toEqual(
      expect.arrayContaining([
        "FenceCleanupDeleted",
        "AttemptLedgerCleanupDeleted",
        "FenceCleanupBacklog",
        "FenceCleanupHeld",
        "StepCleanupDeleted",
        "IdempotencyKeyCleanupDeleted",
      ]),
    );
    for (const name of Object.values(CLEANUP_METRIC)) {
      expect(graphed).toContain(`jobfence ${name} service=fence-cleanup`);
    }
    const apiId = `ApiId=<{'Ref':'${logicalId(stack, stack.api.api)}'}>`;
    for (const name of ["Count", "4xx", "5xx", "Latency", "IntegrationLatency"]) {
      expect(graphed).toContain(`AWS/ApiGateway ${name} ${apiId}`);
    }
  });

  it("shows every alarm's state first", () => {
    const [first] = dashboardBody().widgets;
    expect(first?.type).toBe("alarm");
    expect(first?.properties.alarms).toHaveLength(
      Object.keys(template.findResources("AWS::CloudWatch::Alarm")).length,
    );
  });
});

describe("dead-letter API signing key and bulk operations", () => {
  it("lets the API handler read the signing key, and no other role in the stack", () => {
    const keyRef = JSON.stringify({ Ref: logicalId(stack, stack.api.signingKey) });
    const readerRoles = Object.values(template.findResources("AWS::IAM::Policy"))
      .filter((policy) =>
        (policy.Properties.PolicyDocument.Statement as Array<{ Resource: unknown }>).some((s) =>
          JSON.stringify(s.Resource).includes(keyRef),
        ),
      )
      .flatMap((policy) => policy.Properties.Roles);
    expect(readerRoles).toEqual([{ Ref: logicalId(stack, stack.api.handler.function.role as IConstruct) }]);
    expect(template.findResources("AWS::SecretsManager::ResourcePolicy")).toEqual({});
    template.hasOutput("SigningKeySecretArn", { Value: JSON.parse(keyRef) });
    // No function has it (or a reference to its value) in its environment but the API, by ARN.
    for (const [id, fn] of Object.entries(template.findResources("AWS::Lambda::Function"))) {
      const variables = JSON.stringify(fn.Properties.Environment?.Variables ?? {});
      if (id === logicalId(stack, stack.api.handler.function)) {
        expect(fn.Properties.Environment.Variables.JOBFENCE_SIGNING_KEY_SECRET_ARN).toEqual(
          JSON.parse(keyRef),
        );
        expect(variables.split(logicalId(stack, stack.api.signingKey))).toHaveLength(2);
      } else {
        expect(variables, id).not.toContain(logicalId(stack, stack.api.signingKey));
      }
    }
  });

  it("runs the bulk-operations worker every minute, after the migrations, sending only to the consumer queues", () => {
    const rule = template.toJSON().Resources[logicalId(stack, stack.bulkOperations.schedule)];
    expect(rule.Properties.ScheduleExpression).toBe("rate(1 minute)");
    const [triggerId] = Object.keys(template.findResources("Custom::Trigger"));
    expect(rule.DependsOn).toContain(triggerId);
    const role = { Ref: logicalId(stack, stack.bulkOperations.workerFunction.function.role as IConstruct) };
    const sends = Object.values(template.findResources("AWS::IAM::Policy", { Properties: { Roles: [role] } }))
      .flatMap((p) => p.Properties.PolicyDocument.Statement)
      .filter((s) => [s.Action].flat().some((a: string) => a.startsWith("sqs:")));
    expect(sends.map((s) => ({ ...s, Resource: [s.Resource].flat() }))).toEqual([
      {
        Effect: "Allow",
        Action: "sqs:SendMessage",
        Resource: stack.consumers.map((c) => ({ "Fn::GetAtt": [logicalId(stack, c.queue), "Arn"] })),
      },
    ]);
  });
});

describe("follow-ups", () => {
  const awardPoints = () => stack.consumers.find((c) => c.consumerName === "award-points");
  const notifyUser = () => stack.consumers.find((c) => c.consumerName === "notify-user");

  it("gives award-points notify-user's queue, and only award-points an outbox relay", () => {
    expect(awardPoints()?.outbox?.targets).toEqual({ "notify-user": notifyUser()?.queue });
    expect(notifyUser()?.outbox).toBeUndefined();
    const relays = Object.values(template.findResources("AWS::Lambda::Function"))
      .map((fn) => fn.Properties.Description as string)
      .filter((description) => description?.startsWith("jobfence outbox relay"));
    expect(relays).toEqual(["jobfence outbox relay of award-points"]);
    const queues = (description: string) =>
      Object.values(
        template.findResources("AWS::Lambda::Function", { Properties: { Description: description } }),
      )[0]?.Properties.Environment.Variables.JOBFENCE_OUTBOX_QUEUES;
    const expected = {
      "Fn::Join": [
        "",
        ['{"notify-user":"', { Ref: logicalId(stack, notifyUser()?.queue as IConstruct) }, '"}'],
      ],
    };
    expect(queues("jobfence consumer award-points")).toEqual(expected);
    expect(queues("jobfence outbox relay of award-points")).toEqual(expected);
    expect(queues("jobfence consumer notify-user")).toBeUndefined();
  });

  it("runs the outbox relay every minute, after the migrations, as award-points' login", () => {
    const outbox = awardPoints()?.outbox;
    const rule = template.toJSON().Resources[logicalId(stack, outbox?.schedule as IConstruct)];
    expect(rule.Properties.ScheduleExpression).toBe("rate(1 minute)");
    const [triggerId] = Object.keys(template.findResources("Custom::Trigger"));
    expect(rule.DependsOn).toContain(triggerId);
    const variables =
      template.toJSON().Resources[logicalId(stack, outbox?.relayFunction.function as IConstruct)].Properties
        .Environment.Variables;
    expect(variables.JOBFENCE_DB_SECRET_ARN).toEqual({
      Ref: logicalId(stack, stack.referenceDatabase?.secrets.consumers["award-points"] as IConstruct),
    });
    expect(stack.functions).toContain(outbox?.relayFunction);
  });

  it("refuses consumers that send follow-ups to one another in a cycle, naming it; sending to itself is fine", () => {
    const [award, notify] = ["award-points", "notify-user"].map(
      (name) => CONSUMERS.find((c) => c.definition.name === name) as ConsumerDeployment,
    );
    // Named by payload schema: the copies are not the registered definitions.
    const toNotify = {
      ...(award as ConsumerDeployment),
      definition: { ...award?.definition, sends: { "notify-user": notify?.definition.payload } },
    } as ConsumerDeployment;
    const backToAward = {
      ...(notify as ConsumerDeployment),
      definition: { ...notify?.definition, sends: { "award-points": award?.definition.payload } },
    } as ConsumerDeployment;
    const props = {
      jwtIssuer: "https://auth.example.com",
      jwtAudience: "jobfence-ops",
      betterStackEndpoint: "https://in.logs.betterstack.com",
      betterStackSecretName: "jobfence/betterstack",
      emailProviderUrl: "https://email.example.com",
    };
    let refused: unknown;
    try {
      new JobfenceStack(testApp(), "Cycle", { ...props, consumers: [toNotify, backToAward] });
    } catch (error) {
      refused = error;
    }
    expect(refused).toBeInstanceOf(ConfigurationError);
    expect((refused as ConfigurationError).problems).toEqual([
      expect.stringMatching(
        /^consumers award-points → notify-user → award-points send follow-ups to one another in a cycle: .*break the cycle \(a consumer may send to itself\)$/,
      ),
    ]);
    const toItself = {
      ...(notify as ConsumerDeployment),
      definition: { ...notify?.definition, sends: { "notify-user": notify?.definition.payload } },
    } as ConsumerDeployment;
    const selfSending = new JobfenceStack(testApp(), "SelfSending", {
      ...props,
      consumers: [toNotify, toItself],
    });
    const sender = selfSending.consumers.find((c) => c.consumerName === "notify-user");
    expect(sender?.outbox?.targets).toEqual({ "notify-user": sender?.queue });
  });
});

describe("notify-user's email provider", () => {
  /** Each consumer function's EMAIL_PROVIDER_URL, by consumer. */
  const emailProviderOf = (built: JobfenceStack) => {
    const functions = Template.fromStack(built).findResources("AWS::Lambda::Function");
    return Object.fromEntries(
      built.consumers.map((c) => {
        const resource = functions[logicalId(built, c.consumerFunction.function)] as {
          Properties: { Environment: { Variables: Record<string, unknown> } };
        };
        return [c.consumerName, resource.Properties.Environment.Variables.EMAIL_PROVIDER_URL];
      }),
    );
  };

  it("is given to notify-user's function alone, as EMAIL_PROVIDER_URL", () => {
    expect(emailProviderOf(stack)).toEqual({
      "award-points": undefined,
      "notify-user": "https://email.example.com",
    });
    const drains = stack.consumers.map((c) => c.drainFunction.function);
    for (const drain of drains) {
      const resource = template.findResources("AWS::Lambda::Function")[logicalId(stack, drain)];
      expect(JSON.stringify(resource)).not.toContain("EMAIL_PROVIDER_URL");
    }
  });

  it("refuses to synthesize notify-user without it, or with a URL that is not http(s)", () => {
    const { emailProviderUrl: _url, ...without } = REFERENCE_STACK_PROPS;
    const problemsOf = (props: typeof without & { emailProviderUrl?: string }) => {
      try {
        new JobfenceStack(testApp(), "NoEmail", props);
      } catch (error) {
        expect(error).toBeInstanceOf(ConfigurationError);
        return (error as ConfigurationError).problems;
      }
      return [];
    };
    expect(problemsOf(without)).toEqual([
      expect.stringMatching(
        /^emailProviderUrl \(context jobfence:emailProviderUrl; notify-user's EMAIL_PROVIDER_URL\) is required/,
      ),
    ]);
    expect(problemsOf({ ...without, emailProviderUrl: "ftp://email.example.com" })).toEqual([
      expect.stringMatching(/is "ftp:\/\/email\.example\.com", which is not an http or https URL/),
    ]);
    // Not needed where notify-user is not deployed.
    const award = CONSUMERS.filter((c) => c.definition.name === "award-points").map((c) => ({
      ...c,
      definition: { ...c.definition, sends: {} },
    })) as ConsumerDeployment[];
    expect(problemsOf({ ...without, consumers: award } as typeof without)).toEqual([]);
  });

  it("is read from context jobfence:emailProviderUrl", () => {
    const context: Record<string, string> = {
      "jobfence:jwtIssuer": "https://auth.example.com",
      "jobfence:jwtAudience": "jobfence-ops",
      "jobfence:emailProviderUrl": "http://127.0.0.1:4568",
    };
    expect(stackPropsFromContext((k) => context[k]).emailProviderUrl).toBe("http://127.0.0.1:4568");
  });
});

describe("bundles", () => {
  let synthesized: SynthesizedStack;
  beforeAll(async () => {
    synthesized = await synthesizedReferenceStack();
  });
  const assetOf = (description: string) => synthesized.bundleOf(description);

  it("are ESM .mjs files with a source map, for every function", () => {
    for (const description of [
      "jobfence consumer award-points",
      "jobfence backstop drain of award-points",
      "jobfence outbox relay of award-points",
      "jobfence dead-letter API",
      "jobfence bulk-operations worker (bulk replays and discards, in chunks)",
      "jobfence TTL cleanup of expired fences",
      "jobfence daily escalation of stale pending dead letters",
      "jobfence database migrations (run on deploy)",
    ]) {
      const dir = assetOf(description);
      expect(readdirSync(dir), description).toEqual(expect.arrayContaining(["index.mjs", "index.mjs.map"]));
    }
  });

  it("ship the migrate function with every migration set beside the module that reads it", () => {
    const dir = assetOf("jobfence database migrations (run on deploy)");
    expect(existsSync(join(dir, "shared/db/migrations/0001_processed_jobs.sql"))).toBe(true);
    expect(existsSync(join(dir, "functions/award-points/migrations/0001_ledger.sql"))).toBe(true);
  });
});

describe("database logins", () => {
  it("generates one secret per consumer login, besides ops, cleanup and the migrator, and registers all with the proxy", () => {
    const database = stack.referenceDatabase;
    if (!database) throw new Error("the reference stack creates its database");
    expect(Object.keys(database.secrets.consumers)).toEqual(
      stack.consumers.map((c) => c.node.id.replace(/^Consumer-/, "")),
    );
    const secrets = template.findResources("AWS::SecretsManager::Secret");
    const generated = (secret: IConstruct) => secrets[logicalId(stack, secret)]?.Properties;
    expect(generated(database.secrets.consumers["award-points"] as IConstruct)).toMatchObject({
      Name: "jobfence/db/consumer/award-points",
      GenerateSecretString: {
        SecretStringTemplate: JSON.stringify({ username: "jobfence_login_award_points" }),
      },
    });
    for (const [login, username] of [
      ["ops", "jobfence_ops_login"],
      ["cleanup", "jobfence_cleanup_login"],
      ["migrator", "jobfence_migrator"],
    ] as const) {
      expect(generated(database.secrets[login])).toMatchObject({
        Name: `jobfence/db/${login}`,
        GenerateSecretString: { SecretStringTemplate: JSON.stringify({ username }) },
      });
    }
    const proxy = template.toJSON().Resources[logicalId(stack, database.proxy)];
    const registered = JSON.stringify(proxy.Properties.Auth);
    for (const secret of [
      database.secrets.migrator,
      database.secrets.ops,
      database.secrets.cleanup,
      ...Object.values(database.secrets.consumers),
    ]) {
      expect(registered).toContain(JSON.stringify({ Ref: logicalId(stack, secret) }));
    }
  });

  it("connects each consumer's function, drain and outbox relay with that consumer's login, every other function with its own", () => {
    const database = stack.referenceDatabase;
    if (!database) throw new Error("the reference stack creates its database");
    const secretOf = (fn: { function: IConstruct }) =>
      template.toJSON().Resources[logicalId(stack, fn.function)].Properties.Environment.Variables
        .JOBFENCE_DB_SECRET_ARN;
    const ref = (secret: IConstruct) => ({ Ref: logicalId(stack, secret) });
    for (const consumer of stack.consumers) {
      const name = consumer.node.id.replace(/^Consumer-/, "");
      const secret = database.secrets.consumers[name] as IConstruct;
      expect(secretOf(consumer.consumerFunction)).toEqual(ref(secret));
      expect(secretOf(consumer.drainFunction)).toEqual(ref(secret));
      if (consumer.outbox) expect(secretOf(consumer.outbox.relayFunction)).toEqual(ref(secret));
    }
    expect(secretOf(stack.api.handler)).toEqual(ref(database.secrets.ops));
    expect(secretOf(stack.bulkOperations.workerFunction)).toEqual(ref(database.secrets.ops));
    expect(secretOf(stack.cleanup.escalationFunction)).toEqual(ref(database.secrets.ops));
    expect(secretOf(stack.cleanup.cleanupFunction)).toEqual(ref(database.secrets.cleanup));
    expect(secretOf(stack.migrations.migrateFunction)).toEqual(ref(database.secrets.migrator));
  });
});

describe("stack props from CDK context", () => {
  it("names every missing value at once", () => {
    expect(() => stackPropsFromContext(() => undefined)).toThrow(ConfigurationError);
    try {
      stackPropsFromContext(() => undefined);
    } catch (error) {
      expect((error as ConfigurationError).problems).toEqual([
        "context jobfence:jwtIssuer is required",
        "context jobfence:jwtAudience is required",
        "context jobfence:emailProviderUrl is required",
      ]);
    }
  });

  it("needs no BetterStack settings, and takes them both or not at all", () => {
    const jwt: Record<string, string> = {
      "jobfence:jwtIssuer": "https://auth.example.com",
      "jobfence:jwtAudience": "jobfence-ops",
      "jobfence:emailProviderUrl": "https://email.example.com",
    };
    expect(stackPropsFromContext((k) => jwt[k])).toEqual({
      jwtIssuer: "https://auth.example.com",
      jwtAudience: "jobfence-ops",
      emailProviderUrl: "https://email.example.com",
    });
    const half = { ...jwt, "jobfence:betterStackEndpoint": "https://in.logs.betterstack.com" };
    expect(() => stackPropsFromContext((k) => half[k as keyof typeof half])).toThrow(
      /jobfence:betterStackEndpoint and jobfence:betterStackSecretName go together/,
    );
  });

  it("reads them when present", () => {
    const context: Record<string, string> = {
      "jobfence:jwtIssuer": "https://auth.example.com",
      "jobfence:jwtAudience": "jobfence-ops",
      "jobfence:emailProviderUrl": "https://email.example.com",
      "jobfence:betterStackEndpoint": "https://in.logs.betterstack.com",
      "jobfence:betterStackSecretName": "jobfence/betterstack",
    };
    expect(stackPropsFromContext((k) => context[k])).toEqual({
      jwtIssuer: "https://auth.example.com",
      jwtAudience: "jobfence-ops",
      betterStackEndpoint: "https://in.logs.betterstack.com",
      betterStackSecretName: "jobfence/betterstack",
      emailProviderUrl: "https://email.example.com",
    });
    expect(Stack).toBeDefined();
  });

  it("refuses dbCredentialsRevision, which is no longer used, saying why", () => {
    const context: Record<string, string> = {
      "jobfence:jwtIssuer": "https://auth.example.com",
      "jobfence:jwtAudience": "jobfence-ops",
      "jobfence:emailProviderUrl": "https://email.example.com",
      "jobfence:betterStackEndpoint": "https://in.logs.betterstack.com",
      "jobfence:betterStackSecretName": "jobfence/betterstack",
      "jobfence:dbCredentialsRevision": "2026-11-29",
    };
    expect(() => stackPropsFromContext((k) => context[k])).toThrow(
      /dbCredentialsRevision is no longer used: the functions read their database credentials at run time/,
    );
  });

  it("reads connectionBudget as a whole number and alarmEmails as a list, from -c text or cdk.json", () => {
    const base: Record<string, unknown> = {
      "jobfence:jwtIssuer": "https://auth.example.com",
      "jobfence:jwtAudience": "jobfence-ops",
      "jobfence:emailProviderUrl": "https://email.example.com",
      "jobfence:betterStackEndpoint": "https://in.logs.betterstack.com",
      "jobfence:betterStackSecretName": "jobfence/betterstack",
    };
    const read = (extra: Record<string, unknown>) => stackPropsFromContext((k) => ({ ...base, ...extra })[k]);
    expect(read({ "jobfence:connectionBudget": "400" }).connectionBudget).toBe(400);
    expect(read({ "jobfence:connectionBudget": 400 }).connectionBudget).toBe(400);
    expect(read({}).connectionBudget).toBeUndefined();
    for (const bad of ["many", "0", 1.5, -1]) {
      expect(() => read({ "jobfence:connectionBudget": bad }), String(bad)).toThrow(
        /connectionBudget must be a whole number/,
      );
    }
    expect(read({ "jobfence:alarmEmails": "a@example.com, b@example.com" }).alarmEmails).toEqual([
      "a@example.com",
      "b@example.com",
    ]);
    expect(read({ "jobfence:alarmEmails": ["a@example.com"] }).alarmEmails).toEqual(["a@example.com"]);
    expect(read({}).alarmEmails).toBeUndefined();
    expect(() => read({ "jobfence:alarmEmails": 42 })).toThrow(/alarmEmails must be/);
  });

  it("reads bulkConfirmAbove as a number from -c text or cdk.json, and refuses anything else", () => {
    const base: Record<string, unknown> = {
      "jobfence:jwtIssuer": "https://auth.example.com",
      "jobfence:jwtAudience": "jobfence-ops",
      "jobfence:emailProviderUrl": "https://email.example.com",
      "jobfence:betterStackEndpoint": "https://in.logs.betterstack.com",
      "jobfence:betterStackSecretName": "jobfence/betterstack",
    };
    const read = (value: unknown) =>
      stackPropsFromContext((k) => ({ ...base, "jobfence:bulkConfirmAbove": value })[k]);
    expect(read("250").bulkConfirmAbove).toBe(250);
    expect(read(0).bulkConfirmAbove).toBe(0);
    expect(read(undefined).bulkConfirmAbove).toBeUndefined();
    for (const bad of ["lots", "1.5", "-3", 2.5, true]) {
      expect(() => read(bad), String(bad)).toThrow(ConfigurationError);
    }
  });
});
