/**
 * SDK clients for local emulators: a fixed region and dummy credentials (nothing here talks to
 * AWS), pointed at the emulator's endpoint, with the library's timeouts (shared/aws/clients.ts)
 * but a single attempt: a local failure is reported at once rather than retried.
 */
import type { EventBridgeClient } from "@aws-sdk/client-eventbridge";
import type { SQSClient } from "@aws-sdk/client-sqs";
import { createEventBridgeClient, createSqsClient } from "../shared/aws/clients.ts";

/** The region every local resource pretends to live in. */
export const LOCAL_REGION = "eu-west-1";
/** The account id local queue ARNs carry (the emulator's). */
export const LOCAL_ACCOUNT = "000000000000";

const credentials = { accessKeyId: "local", secretAccessKey: "local" };

/** An SQS client for the emulator at `endpoint`. */
export function localSqsClient(endpoint: string): SQSClient {
  return createSqsClient({ endpoint, region: LOCAL_REGION, credentials, maxAttempts: 1 });
}

/** An EventBridge client for the sink at `endpoint`. */
export function localEventBridgeClient(endpoint: string): EventBridgeClient {
  return createEventBridgeClient({ endpoint, region: LOCAL_REGION, credentials, maxAttempts: 1 });
}
