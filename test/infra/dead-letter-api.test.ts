/** DeadLetterApi (SPEC §6): JWT authorizer, one scope per route, access log, throttling, least IAM. */
import { Match, Template } from "aws-cdk-lib/assertions";
import * as sqs from "aws-cdk-lib/aws-sqs";
import type { IConstruct } from "constructs";
import { beforeAll, describe, expect, it } from "vitest";
import { ROUTES } from "../../functions/dead-letters-api/routes.ts";
import { DeadLetterApi } from "../../infra/constructs/dead-letter-api.ts";
import { ConfigurationError } from "../../shared/errors.ts";
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

  it("has one route per ROUTES entry, each behind the JWT authorizer with exactly its permission as scope", () => {
    const authorizerId = logicalId(env.stack, api.node.findChild("Api").node.findChild("Jwt") as IConstruct);
    const routes = Object.values(template.findResources("AWS::ApiGatewayV2::Route"));
    expect(routes).toHaveLength(ROUTES.length);
    for (const route of ROUTES) {
      template.hasResourceProperties("AWS::ApiGatewayV2::Route", {
        RouteKey: `${route.method} ${route.path}`,
        AuthorizationType: "JWT",
        AuthorizerId: { Ref: authorizerId },
        AuthorizationScopes: [route.permission],
      });
    }
    // The table itself: reads need read, replays need replay, the discard needs discard.
    expect(ROUTES.map((r) => `${r.method} ${r.path} ${r.permission}`)).toEqual([
      `GET /v1/core/dead-letters ${PERMISSION.read}`,
      `GET /v1/core/dead-letters/stats ${PERMISSION.read}`,
      `GET /v1/core/dead-letters/{id} ${PERMISSION.read}`,
      `POST /v1/core/dead-letters/{id}/replay ${PERMISSION.replay}`,
      `POST /v1/core/dead-letters/replay ${PERMISSION.replay}`,
      `POST /v1/core/dead-letters/{id}/discard ${PERMISSION.discard}`,
    ]);
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
        }),
      },
    });
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
