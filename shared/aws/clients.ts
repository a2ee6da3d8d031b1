/**
 * The one place the library builds AWS SDK clients, so every client it makes has bounded calls.
 *
 * The SDK's own defaults wait for ever to connect and for a response (requestTimeout 0, and only
 * a socket inactivity timeout of several minutes): a hung SQS, EventBridge or Secrets Manager call
 * would hold a Lambda batch until the function times out, and every record of it would then come
 * back. Here a connection must be established within {@link AWS_CLIENT_DEFAULTS}.connectionTimeoutMs
 * and a whole request answered within requestTimeoutMs, each attempt; a call that breaches them
 * fails with a `TimeoutError` (and is retried up to maxAttempts like any other transient failure).
 *
 * `throwOnRequestTimeout` matters: without it the SDK's HTTP handler only logs a warning when
 * requestTimeout passes and goes on waiting.
 */
import { EventBridgeClient, type EventBridgeClientConfig } from "@aws-sdk/client-eventbridge";
import { SecretsManagerClient, type SecretsManagerClientConfig } from "@aws-sdk/client-secrets-manager";
import { SQSClient, type SQSClientConfig } from "@aws-sdk/client-sqs";

/** What every client the library builds gets unless the caller says otherwise. */
export const AWS_CLIENT_DEFAULTS = Object.freeze({
  /** To establish the TCP (and TLS) connection, per attempt. */
  connectionTimeoutMs: 1000,
  /** From sending the request to the end of the response, per attempt. */
  requestTimeoutMs: 5000,
  /** Attempts per call, the first included (the SDK's standard retry mode). */
  maxAttempts: 3,
});

/** The two timeouts, which a caller may override (tests, a long poll's client). */
export interface AwsClientTimeouts {
  /** @default AWS_CLIENT_DEFAULTS.connectionTimeoutMs */
  readonly connectionTimeoutMs?: number;
  /** @default AWS_CLIENT_DEFAULTS.requestTimeoutMs */
  readonly requestTimeoutMs?: number;
}

/**
 * A client's own configuration (endpoint, region, credentials, maxAttempts, …) merged over the
 * defaults, plus the timeouts. The request handler is not the caller's to replace: it is what
 * carries the timeouts.
 */
export type AwsClientOptions<Config> = Omit<Config, "requestHandler"> & AwsClientTimeouts;

/** The SDK configuration for `options`: defaults first, the caller's settings over them. */
function withDefaults<Config>(options: AwsClientOptions<Config>): Config {
  const {
    connectionTimeoutMs = AWS_CLIENT_DEFAULTS.connectionTimeoutMs,
    requestTimeoutMs = AWS_CLIENT_DEFAULTS.requestTimeoutMs,
    ...config
  } = options;
  return {
    maxAttempts: AWS_CLIENT_DEFAULTS.maxAttempts,
    ...config,
    // The options form of the Node HTTP handler: the SDK builds its NodeHttpHandler from them.
    requestHandler: {
      connectionTimeout: connectionTimeoutMs,
      requestTimeout: requestTimeoutMs,
      throwOnRequestTimeout: true,
    },
  } as Config;
}

/**
 * An SQS client with the library's timeouts, sending to its own endpoint (the region's, or the one
 * given) whatever host a QueueUrl names. The SDK's default would send each request to the QueueUrl's
 * host, and a replay takes its QueueUrl from a dead letter, which a consumer wrote: a row naming
 * some other host would have its body, signed, delivered there.
 */
export function createSqsClient(options: AwsClientOptions<SQSClientConfig> = {}): SQSClient {
  return new SQSClient(withDefaults<SQSClientConfig>({ useQueueUrlAsEndpoint: false, ...options }));
}

/** An EventBridge client with the library's timeouts. */
export function createEventBridgeClient(
  options: AwsClientOptions<EventBridgeClientConfig> = {},
): EventBridgeClient {
  return new EventBridgeClient(withDefaults<EventBridgeClientConfig>(options));
}

/** A Secrets Manager client with the library's timeouts. */
export function createSecretsManagerClient(
  options: AwsClientOptions<SecretsManagerClientConfig> = {},
): SecretsManagerClient {
  return new SecretsManagerClient(withDefaults<SecretsManagerClientConfig>(options));
}
