/**
 * DeadLetterApi: JWT authorizer, every ROUTES entry deployed with its permissions as
 * scopes, access log, throttling, least IAM, and the signing key in a secret only the handler reads.
 */

import type { CfnElement } from "aws-cdk-lib";
import { Match, Template } from "aws-cdk-lib/assertions";
import * as sqs from "aws-cdk-lib/aws-sqs";
import type { IConstruct } from "constructs";
import { beforeAll, describe, expect, it } from "vitest";
import { createResolver } from "../../functions/dead-letters-api/resolve.ts";
import { ROUTES, routePermissions } from "../../functions/dead-letters-api/routes.ts";
import { DeadLetterApi } from "../../infra/constructs/dead-letter-api.ts";
import { IDEMPOTENCY } from "../../shared/dead-letters/idempotency.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { PERMISSION } from "../../shared/http/auth.ts";
import { logicalId, type TestEnvironment, testEnvironment } from "./support.ts";

let env: TestEnvironment;
let api: DeadLetterApi;
let queues: sqs.Queue[];
let template: Template;

beforeAll(() => {
  env = testEnvironment();
  queues = [new sqs.Queue(env.stack, "QueueA"), new sqs.Queue(env.stack, "QueueB")];
  api = new DeadLetterApi(env.stack, "DeadLetters", {
    database: env.database,
    jwtIssuer: "https://auth.example.com",
    jwtAudience: "jobfence-ops",
    consumerQueues: queues,
  });
  template = Template.fromStack(env.stack);
});

describe("DeadLetterApi", () => {
  it("has a JWT authorizer with the issuer and audience from props", () => {
    template.hasResourceProperties("AWS::ApiGatewayV2::Authorizer", {
      AuthorizerType: "JWT",
      JwtConfiguration: { Issuer: "https://auth.example.com", Audience: ["jobfence-ops"] },
      IdentitySource: ["$request.header.Authorization"],
    });
  });

  it("deploys every ROUTES entry, and HEAD beside each GET, behind the JWT authorizer with all its permissions as scopes", () => {
    const authorizerId = logicalId(env.stack, api.node.findChild("Api").node.findChild("Jwt") as IConstruct);
    const routes = Object.values(template.findResources("AWS::ApiGatewayV2::Route"));
    const expectedKeys = ROUTES.map((route) => `${route.method} ${route.path}`);
    expect(new Set(expectedKeys).size).toBe(ROUTES.length);
    const operations = ROUTES.flatMap((route) =>
      route.method === "GET"
        ? [
            { route, method: "GET" },
            { route, method: "HEAD" },
          ]
        : [{ route, method: route.method }],
    );
    for (const { route, method } of operations) {
      const key = `${method} ${route.path}`;
      const deployed = routes.filter((r) => r.Properties.RouteKey === key);
      expect(deployed, key).toHaveLength(1);
      expect(deployed[0]?.Properties, key).toMatchObject({
        AuthorizationType: "JWT",
        AuthorizerId: { Ref: authorizerId },
      });
      expect(deployed[0]?.Properties.AuthorizationScopes, key).toEqual([...routePermissions(route)]);
    }
  });

  it("routes every other method of each path, and $default, to the handler without an authorizer (its 405 and 404 problems), and nothing else", () => {
    const routes = Object.values(template.findResources("AWS::ApiGatewayV2::Route"));
    const operationKeys = new Set(
      ROUTES.flatMap((route) => [
        `${route.method} ${route.path}`,
        ...(route.method === "GET" ? [`HEAD ${route.path}`] : []),
      ]),
    );
    const paths = [...new Set(ROUTES.map((route) => route.path))];
    const methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];
    const problemKeys = [
      ...paths
        .flatMap((path) => methods.map((method) => `${method} ${path}`))
        .filter((k) => !operationKeys.has(k)),
      "$default",
    ];
    const keys = routes.map((r) => r.Properties.RouteKey as string);
    expect(keys.sort()).toEqual([...operationKeys, ...problemKeys].sort());
    for (const key of problemKeys) {
      const [deployed] = routes.filter((r) => r.Properties.RouteKey === key);
      expect(deployed?.Properties.AuthorizationType, key).toBe("NONE");
      expect(deployed?.Properties.AuthorizerId, key).toBeUndefined();
      expect(deployed?.Properties.AuthorizationScopes, key).toBeUndefined();
    }
    // Each of these is a 405 or 404 in the handler, before any token is read (resolve.ts).
    const resolve = createResolver();
    for (const key of problemKeys.filter((k) => k !== "$default")) {
      const [method = "", path = ""] = key.split(" ");
      expect(resolve(method, path.replaceAll("{id}", "00000000-0000-4000-8000-000000000000")).kind, key).toBe(
        "methodNotAllowed",
      );
    }
  });

  it("lets this API, and only it, invoke the handler, with one permission for all its routes", () => {
    const fn = logicalId(env.stack, api.handler.function);
    const permissions = Object.values(template.findResources("AWS::Lambda::Permission")).filter((p) =>
      JSON.stringify(p.Properties.FunctionName).includes(fn),
    );
    expect(permissions).toHaveLength(1);
    expect(permissions[0]?.Properties).toMatchObject({
      Action: "lambda:InvokeFunction",
      Principal: "apigateway.amazonaws.com",
    });
    const source = JSON.stringify(permissions[0]?.Properties.SourceArn);
    expect(source).toContain(JSON.stringify({ Ref: logicalId(env.stack, api.api) }));
    expect(source).toContain("/*/*/*");
  });

  it("sends every route to the one handler", () => {
    const integrations = Object.entries(template.findResources("AWS::ApiGatewayV2::Integration"));
    expect(integrations).toHaveLength(1);
    const [[integrationId, integration]] = integrations as [
      [string, { Properties: Record<string, unknown> }],
    ];
    expect(JSON.stringify(integration.Properties.IntegrationUri)).toContain(
      logicalId(env.stack, api.handler.function),
    );
    for (const route of Object.values(template.findResources("AWS::ApiGatewayV2::Route"))) {
      expect(route.Properties.Target, route.Properties.RouteKey).toEqual({
        "Fn::Join": ["", ["integrations/", { Ref: integrationId }]],
      });
    }
  });

  it("requires read on every GET and never read alone on a POST (the routes act only with replay or discard)", () => {
    expect(ROUTES.some((route) => routePermissions(route).length > 1)).toBe(true);
    for (const route of ROUTES) {
      const permissions = routePermissions(route);
      expect(permissions.length, route.path).toBeGreaterThan(0);
      if (route.method === "GET") expect(permissions, route.path).toEqual([PERMISSION.read]);
      else expect(permissions, `${route.method} ${route.path}`).not.toContain(PERMISSION.read);
    }
  });

  it("alarms on any 5xx answer: the handler answers problems, so Lambda's Errors never shows them", () => {
    template.hasResourceProperties("AWS::CloudWatch::Alarm", {
      MetricName: "5xx",
      Namespace: "AWS/ApiGateway",
      Dimensions: [
        { Name: "ApiId", Value: { Ref: env.stack.getLogicalId(api.api.node.defaultChild as CfnElement) } },
      ],
      Statistic: "Sum",
      Period: 300,
      Threshold: 0,
      ComparisonOperator: "GreaterThanThreshold",
      TreatMissingData: "notBreaching",
    });
  });

  it("logs access and throttles on the stage", () => {
    template.hasResourceProperties("AWS::ApiGatewayV2::Stage", {
      StageName: "$default",
      AutoDeploy: true,
      DefaultRouteSettings: { ThrottlingRateLimit: 50, ThrottlingBurstLimit: 100 },
      AccessLogSettings: {
        DestinationArn: { "Fn::GetAtt": [logicalId(env.stack, api.accessLog), "Arn"] },
        Format: Match.stringLikeRegexp("requestId"),
      },
    });
  });

  it("runs the handler on Node 24 arm64 as the ops login, with the issuer, audience and JWKS URL", () => {
    template.hasResourceProperties("AWS::Lambda::Function", {
      Runtime: "nodejs24.x",
      Architectures: ["arm64"],
      Description: "jobfence dead-letter API",
      Environment: {
        Variables: Match.objectLike({
          JOBFENCE_JWT_ISSUER: "https://auth.example.com",
          JOBFENCE_JWT_AUDIENCE: "jobfence-ops",
          JOBFENCE_JWKS_URL: "https://auth.example.com/.well-known/jwks.json",
          JOBFENCE_DB_SECRET_ARN: { Ref: logicalId(env.stack, env.secrets.ops) },
          JOBFENCE_SIGNING_KEY_SECRET_ARN: { Ref: logicalId(env.stack, api.signingKey) },
          JOBFENCE_BULK_CONFIRM_ABOVE: "100",
        }),
      },
    });
  });

  it("stops the handler well before an unanswered Idempotency-Key claim may be taken over", () => {
    const functions = Object.values(
      template.findResources("AWS::Lambda::Function", {
        Properties: { Description: "jobfence dead-letter API" },
      }),
    );
    expect(functions).toHaveLength(1);
    const timeout = Number(functions[0]?.Properties?.Timeout);
    // API Gateway gives up at 30 seconds whatever the function's timeout; a claim is taken over later.
    expect(timeout).toBeLessThanOrEqual(30);
    expect(IDEMPOTENCY.staleAfterSeconds).toBeGreaterThanOrEqual(2 * timeout);
  });

  it("generates the signing key as the whole secret string: 64 letters and digits", () => {
    const secret = template.toJSON().Resources[logicalId(env.stack, api.signingKey)];
    expect(secret.Type).toBe("AWS::SecretsManager::Secret");
    expect(secret.Properties.SecretString).toBeUndefined();
    expect(secret.Properties.GenerateSecretString).toEqual({
      PasswordLength: 64,
      ExcludePunctuation: true,
      IncludeSpace: false,
    });
    // 64 characters of 62: well above the 32 bytes the function requires.
    expect(secret.Properties.GenerateSecretString.PasswordLength).toBeGreaterThanOrEqual(64);
  });

  it("passes the signing key's ARN only: no key material and no dynamic reference to it in the environment", () => {
    const fn = template.toJSON().Resources[logicalId(env.stack, api.handler.function)];
    const variables = fn.Properties.Environment.Variables as Record<string, unknown>;
    const keyRef = JSON.stringify({ Ref: logicalId(env.stack, api.signingKey) });
    for (const [name, value] of Object.entries(variables)) {
      const text = JSON.stringify(value);
      if (name === "JOBFENCE_SIGNING_KEY_SECRET_ARN") expect(text).toBe(keyRef);
      else expect(text, name).not.toContain(logicalId(env.stack, api.signingKey));
    }
    // No dynamic reference at all: the ops login's secret is passed by ARN, read at run time.
    expect(JSON.stringify(variables)).not.toContain("resolve:secretsmanager:");
    expect(variables.DATABASE_URL).toBeUndefined();
    expect(variables.JOBFENCE_DB_SECRET_ARN).toEqual({ Ref: logicalId(env.stack, env.secrets.ops) });
  });

  it("lets the handler read the signing key, and nothing else in the stack", () => {
    const keyRef = { Ref: logicalId(env.stack, api.signingKey) };
    const readers = Object.values(template.findResources("AWS::IAM::Policy")).flatMap((policy) =>
      (policy.Properties.PolicyDocument.Statement as Array<{ Action: unknown; Resource: unknown }>)
        .filter((s) => JSON.stringify(s.Resource).includes(JSON.stringify(keyRef)))
        .map((s) => ({ roles: policy.Properties.Roles, actions: [s.Action].flat(), resource: s.Resource })),
    );
    expect(readers).toEqual([
      {
        roles: [{ Ref: logicalId(env.stack, api.handler.function.role as IConstruct) }],
        actions: ["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
        resource: keyRef,
      },
    ]);
    expect(template.findResources("AWS::SecretsManager::ResourcePolicy")).toEqual({});
  });

  it("passes bulkConfirmAbove as JOBFENCE_BULK_CONFIRM_ABOVE", () => {
    const local = testEnvironment();
    const strict = new DeadLetterApi(local.stack, "Strict", {
      database: local.database,
      jwtIssuer: "https://auth.example.com",
      jwtAudience: "jobfence-ops",
      consumerQueues: [new sqs.Queue(local.stack, "Queue")],
      bulkConfirmAbove: 0,
    });
    const fn = Template.fromStack(local.stack).toJSON().Resources[
      logicalId(local.stack, strict.handler.function)
    ];
    expect(fn.Properties.Environment.Variables.JOBFENCE_BULK_CONFIRM_ABOVE).toBe("0");
  });

  it.each([-1, 1.5, 1_000_001, Number.NaN])("refuses bulkConfirmAbove %s", (bulkConfirmAbove) => {
    const thunk = () => {
      const local = testEnvironment();
      return new DeadLetterApi(local.stack, "Bad", {
        database: local.database,
        jwtIssuer: "https://auth.example.com",
        jwtAudience: "jobfence-ops",
        consumerQueues: [new sqs.Queue(local.stack, "Queue")],
        bulkConfirmAbove,
      });
    };
    expect(thunk).toThrow(ConfigurationError);
    expect(thunk).toThrow(/bulkConfirmAbove must be an integer 0–1000000/);
  });

  it("may SendMessage only to the consumer queues it was given", () => {
    const statements = Object.values(
      template.findResources("AWS::IAM::Policy", {
        Properties: { Roles: [{ Ref: logicalId(env.stack, api.handler.function.role as IConstruct) }] },
      }),
    ).flatMap((p) => p.Properties.PolicyDocument.Statement);
    const sqsStatements = statements.filter((s) =>
      [s.Action].flat().some((a: string) => a.startsWith("sqs:")),
    );
    expect(sqsStatements).toEqual([
      {
        Effect: "Allow",
        Action: "sqs:SendMessage",
        Resource: queues.map((q) => ({ "Fn::GetAtt": [logicalId(env.stack, q), "Arn"] })),
      },
    ]);
  });

  it("refuses a non-HTTPS issuer, a blank audience and no queues together", () => {
    const thunk = () =>
      new DeadLetterApi(testEnvironment().stack, "Bad", {
        database: env.database,
        jwtIssuer: "http://auth",
        jwtAudience: " ",
        consumerQueues: [],
      });
    expect(thunk).toThrow(ConfigurationError);
    expect(thunk).toThrow(/jwtIssuer[\s\S]*jwtAudience[\s\S]*consumerQueues/);
  });
});
