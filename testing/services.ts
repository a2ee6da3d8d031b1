/**
 * The AWS side of a consumer test, in process: the SQS emulator the consumer's queue lives on and
 * the EventBridge sink its dead-letter alerts go to, with SDK clients pointed at them. Started
 * together and stopped together, so a test never talks to AWS by accident.
 */
import type { EventBridgeClient } from "@aws-sdk/client-eventbridge";
import type { SQSClient } from "@aws-sdk/client-sqs";
import { localEventBridgeClient, localSqsClient } from "../local/aws-clients.ts";
import { type EventBridgeSink, startEventBridgeSink } from "../local/eventbridge-sink.ts";
import { type SqsEmulator, startSqsEmulator } from "../local/sqs-emulator.ts";

/**
 * The ops bus name consumers under test are configured with. The sink accepts any name; a fixed
 * one lets a test tell the consumer's alerts apart from anything else it publishes.
 */
export const TEST_OPS_BUS = "jobfence-ops-test";

/** The emulator, the sink and clients for both. */
export interface TestServices {
  readonly emulator: SqsEmulator;
  readonly sink: EventBridgeSink;
  /** An SQS client for {@link TestServices.emulator}. */
  readonly sqs: SQSClient;
  /** An EventBridge client for {@link TestServices.sink}. */
  readonly eventBridge: EventBridgeClient;
  /** Stops both (queues and received events are gone afterwards). */
  stop(): Promise<void>;
}

/** Starts the SQS emulator and the EventBridge sink, each on a free port of 127.0.0.1. */
export async function startTestServices(): Promise<TestServices> {
  const [emulator, sink] = await Promise.allSettled([startSqsEmulator(), startEventBridgeSink()]);
  if (emulator.status === "rejected" || sink.status === "rejected") {
    // One of them started: stop it, or its server keeps the test process alive.
    await Promise.allSettled([
      emulator.status === "fulfilled" ? emulator.value.stop() : undefined,
      sink.status === "fulfilled" ? sink.value.stop() : undefined,
    ]);
    throw emulator.status === "rejected" ? emulator.reason : (sink as PromiseRejectedResult).reason;
  }
  const sqs = localSqsClient(emulator.value.endpoint);
  const eventBridge = localEventBridgeClient(sink.value.endpoint);
  return {
    emulator: emulator.value,
    sink: sink.value,
    sqs,
    eventBridge,
    async stop() {
      await Promise.all([emulator.value.stop(), sink.value.stop()]);
      sqs.destroy();
      eventBridge.destroy();
    },
  };
}
