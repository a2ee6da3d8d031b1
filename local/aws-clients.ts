/**
 * SDK clients for local emulators: a fixed region and dummy credentials (nothing here talks to
 * AWS), pointed at the emulator's endpoint.
 */
import { EventBridgeClient } from "@aws-sdk/client-eventbridge";
import { SQSClient } from "@aws-sdk/client-sqs";

/** The region every local resource pretends to live in. */
export const LOCAL_REGION = "eu-west-1";
/** The account id local queue ARNs carry (the emulator's). */
export const LOCAL_ACCOUNT = "000000000000";

const credentials = { accessKeyId: "local", secretAccessKey: "local" };

/** An SQS client for the emulator at `endpoint`. */
export function localSqsClient(endpoint: string): SQSClient {
  return new SQSClient({ endpoint, region: LOCAL_REGION, credentials, maxAttempts: 1 });
}

/** An EventBridge client for the sink at `endpoint`. */
export function localEventBridgeClient(endpoint: string): EventBridgeClient {
  return new EventBridgeClient({ endpoint, region: LOCAL_REGION, credentials, maxAttempts: 1 });
}
