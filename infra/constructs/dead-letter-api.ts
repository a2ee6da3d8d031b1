/**
 * The dead-letter API (docs/api.md): an HTTP API whose JWT authorizer checks the issuer and audience
 * and requires, on each route of `ROUTES` (and HEAD beside each GET), one of that route's
 * permissions as a scope; the handler checks the token and the permissions again. Every other
 * method of each path, and `$default`, reach the handler too, without an authorizer, so a request
 * the API refuses as 405 or 404 gets the API's problem, not API Gateway's `{"message":"Not Found"}`. Access logging and throttling are on the stage. The
 * handler logs in as the ops login, and may `SendMessage` only to the consumer queues it was given
 * (a replay republishes to the stored queue).
 *
 * List cursors and bulk-operation plan tokens are signed with a key the construct generates in a
 * Secrets Manager secret: only the handler may read it, and the template holds only its ARN (the
 * handler reads the value at start, shared/aws/seal-key-secret.ts).
 */

import { Duration, RemovalPolicy, Validations } from "aws-cdk-lib";
import * as apigwv2 from "aws-cdk-lib/aws-apigatewayv2";
import { HttpJwtAuthorizer } from "aws-cdk-lib/aws-apigatewayv2-authorizers";
import { HttpLambdaIntegration } from "aws-cdk-lib/aws-apigatewayv2-integrations";
import type * as cloudwatch from "aws-cdk-lib/aws-cloudwatch";
import * as logs from "aws-cdk-lib/aws-logs";
import * as secretsmanager from "aws-cdk-lib/aws-secretsmanager";
import type * as sqs from "aws-cdk-lib/aws-sqs";
import { Construct } from "constructs";
import { API_ENV } from "../../functions/dead-letters-api/config.ts";
import { gatewayRoutes } from "../../functions/dead-letters-api/resolve.ts";
import { ConfigurationError } from "../../shared/errors/configuration.ts";
import { API_DEFAULTS } from "../defaults.ts";
import { alarmFactory } from "./alarms.ts";
import type { DatabaseAccess } from "./database.ts";
import { jobfenceEntry } from "./entries.ts";
import { JobfenceFunction } from "./jobfence-function.ts";
import { grantReplaySend } from "./replay-send.ts";

/** Props of {@link DeadLetterApi}. */
export interface DeadLetterApiProps {
  readonly database: DatabaseAccess;
  /** The token issuer (`iss`), an https URL. */
  readonly jwtIssuer: string;
  /** The required audience (`aud`). */
  readonly jwtAudience: string;
  /**
   * The issuer's JWKS endpoint, which the handler uses to verify tokens again.
   * @default `${jwtIssuer}/.well-known/jwks.json`
   */
  readonly jwksUrl?: string;
  /** The consumers' source queues: the only queues a replay may send to. */
  readonly consumerQueues: readonly sqs.IQueue[];
  /** @default API_DEFAULTS.throttlingRateLimit */
  readonly throttlingRateLimit?: number;
  /** @default API_DEFAULTS.throttlingBurstLimit */
  readonly throttlingBurstLimit?: number;
  /**
   * A bulk replay or discard over more dead letters than this needs the token of its plan
   * (`JOBFENCE_BULK_CONFIRM_ABOVE`); an integer 0–1,000,000, 0 requiring a token always.
   * @default API_DEFAULTS.bulkConfirmAbove (100)
   */
  readonly bulkConfirmAbove?: number;
}

/** The HTTP API, its authorizer, stage, access log and handler. */
export class DeadLetterApi extends Construct {
  readonly api: apigwv2.HttpApi;
  readonly stage: apigwv2.HttpStage;
  readonly authorizer: HttpJwtAuthorizer;
  readonly handler: JobfenceFunction;
  readonly accessLog: logs.LogGroup;
  /** The key that signs list cursors and plan tokens (a generated string); only the handler reads it. */
  readonly signingKey: secretsmanager.Secret;
  /**
   * The API answered 5xx: the handler failed (a database outage, the issuer's keys unreachable, a
   * bug), which Lambda's Errors never shows, since the handler answers a problem document.
   */
  readonly alarms: { readonly serverErrors: cloudwatch.Alarm };

  constructor(scope: Construct, id: string, props: DeadLetterApiProps) {
    super(scope, id);
    const problems: string[] = [];
    if (!/^https:\/\/\S+$/.test(props.jwtIssuer)) {
      problems.push(`jwtIssuer must be an https:// URL, got "${props.jwtIssuer}"`);
    }
    if (!/\S/.test(props.jwtAudience)) problems.push("jwtAudience must not be blank");
    if (props.jwksUrl !== undefined && !/^https:\/\/\S+$/.test(props.jwksUrl)) {
      problems.push(`jwksUrl must be an https:// URL, got "${props.jwksUrl}"`);
    }
    if (props.consumerQueues.length === 0) {
      problems.push("consumerQueues must name at least one queue (replays send only to these)");
    }
    const rate = props.throttlingRateLimit ?? API_DEFAULTS.throttlingRateLimit;
    const burst = props.throttlingBurstLimit ?? API_DEFAULTS.throttlingBurstLimit;
    if (!(rate > 0) || !Number.isInteger(burst) || burst < 1) {
      problems.push(`throttling needs a positive rate and burst, got ${rate}/s and ${burst}`);
    }
    const confirmAbove = props.bulkConfirmAbove ?? API_DEFAULTS.bulkConfirmAbove;
    if (
      !Number.isInteger(confirmAbove) ||
      confirmAbove < 0 ||
      confirmAbove > API_DEFAULTS.bulkConfirmAboveMax
    ) {
      problems.push(
        `bulkConfirmAbove must be an integer 0–${API_DEFAULTS.bulkConfirmAboveMax}, got ${confirmAbove}`,
      );
    }
    if (problems.length > 0) throw new ConfigurationError("DeadLetterApi", problems);

    // The whole SecretString is the key. Nothing lasting depends on it (a new key only stops
    // outstanding cursors and plan tokens from verifying), so it goes with the stack.
    this.signingKey = new secretsmanager.Secret(this, "SigningKey", {
      description: "jobfence dead-letter API: the key that signs list cursors and bulk plan tokens",
      generateSecretString: {
        passwordLength: API_DEFAULTS.signingKeyLength,
        excludePunctuation: true,
        includeSpace: false,
      },
      removalPolicy: RemovalPolicy.DESTROY,
    });
    Validations.of(this.signingKey).acknowledge({
      id: "AwsSolutions-SMG4",
      reason:
        "The signing key of list cursors and bulk plan tokens protects nothing stored: a new key only makes outstanding cursors and plan tokens (valid 15 minutes) stop verifying, so it is rotated by hand when wanted (put a new random value, docs/deploy.md) rather than by a rotation function.",
    });

    this.handler = new JobfenceFunction(this, "Handler", {
      entry: jobfenceEntry("dead-letters-api"),
      description: "jobfence dead-letter API",
      timeout: API_DEFAULTS.timeout,
      database: props.database,
      login: "ops",
      environment: {
        [API_ENV.issuer]: props.jwtIssuer,
        [API_ENV.audience]: props.jwtAudience,
        [API_ENV.jwksUrl]: props.jwksUrl ?? `${props.jwtIssuer.replace(/\/$/, "")}/.well-known/jwks.json`,
        // The ARN only: the handler reads the key itself, so it is in no template or configuration.
        [API_ENV.signingKeySecretArn]: this.signingKey.secretArn,
        [API_ENV.bulkConfirmAbove]: String(confirmAbove),
      },
    });
    this.signingKey.grantRead(this.handler.function);
    grantReplaySend(this.handler.function, props.consumerQueues);

    this.api = new apigwv2.HttpApi(this, "Api", {
      description: "jobfence dead-letter API",
      createDefaultStage: false,
    });
    this.accessLog = new logs.LogGroup(this, "AccessLog", { retention: API_DEFAULTS.accessLogRetention });
    this.stage = new apigwv2.HttpStage(this, "Stage", {
      httpApi: this.api,
      stageName: "$default",
      autoDeploy: true,
      throttle: { rateLimit: rate, burstLimit: burst },
      accessLogSettings: { destination: new apigwv2.LogGroupLogDestination(this.accessLog) },
    });
    this.authorizer = new HttpJwtAuthorizer("Jwt", props.jwtIssuer, {
      jwtAudience: [props.jwtAudience],
      identitySource: ["$request.header.Authorization"],
    });
    // One invoke permission for the whole API, not one per route: with every method of every path
    // routed (below), per-route statements would overflow the function's 20 KB resource policy.
    const integration = new HttpLambdaIntegration("Handler", this.handler.function, {
      scopePermissionToRoute: false,
    });
    // Routes without an operation (another method of a path, $default for a path the API does
    // not have) are answered by the handler with a 405 or 404 problem before it reads any token,
    // so they need no authorizer; the handler verifies the token itself before any operation.
    const none = new apigwv2.HttpNoneAuthorizer();
    const openRoutes: apigwv2.HttpRoute[] = [];
    for (const route of gatewayRoutes()) {
      const added = this.api.addRoutes({
        path: route.path,
        methods: [apigwv2.HttpMethod[route.method]],
        integration,
        // API Gateway lets a token through holding any one of the route's scopes; a route that
        // accepts several (cancel: replay or discard) has the handler check the one it needs.
        ...(route.operation
          ? { authorizer: this.authorizer, authorizationScopes: [...route.scopes] }
          : { authorizer: none }),
      });
      if (!route.operation) openRoutes.push(...added);
    }
    openRoutes.push(
      new apigwv2.HttpRoute(this, "Fallback", {
        httpApi: this.api,
        routeKey: apigwv2.HttpRouteKey.DEFAULT,
        integration,
        authorizer: none,
      }),
    );
    for (const route of openRoutes) {
      Validations.of(route).acknowledge({
        id: "AwsSolutions-APIG4",
        reason:
          "The handler answers this route only with a 405 or 404 problem, before it reads any token: no operation is reachable by it (every operation's route has the JWT authorizer, and the handler verifies the token itself before any operation).",
      });
    }
    this.alarms = {
      serverErrors: alarmFactory(this)(
        "ServerErrorsAlarm",
        this.api.metricServerError({ period: Duration.minutes(5), statistic: "Sum" }),
        0,
        "the jobfence dead-letter API answered 5xx (its log has each one's correlation_id)",
      ),
    };
  }

  /** The API's base URL. */
  get url(): string {
    return this.stage.url;
  }
}
