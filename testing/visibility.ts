/**
 * Watching what a consumer under test does to its messages' visibility: which received messages
 * it made visible again at once (VisibilityTimeout 0). The harness does that to records it hands
 * back unrun (shared/record/return-to-queue.ts); such a record is in the queue again, waiting for
 * the next receive, and the receipt handle it was delivered with is no longer valid.
 */
import type {
  ChangeMessageVisibilityBatchRequest,
  ChangeMessageVisibilityBatchResult,
  ChangeMessageVisibilityRequest,
  SQSClient,
} from "@aws-sdk/client-sqs";

/** The receipt handles a client made visible again, as SQS confirmed them. */
export class VisibilityWatch {
  readonly #visible = new Set<string>();

  /** Watches every visibility change `sqs` makes from now on (give it the consumer's client). */
  watch(sqs: SQSClient): void {
    sqs.middlewareStack.add(
      (next, context) => async (args) => {
        const result = await next(args);
        if (context.commandName === "ChangeMessageVisibilityCommand") {
          const input = args.input as ChangeMessageVisibilityRequest;
          if (input.VisibilityTimeout === 0 && input.ReceiptHandle) this.#visible.add(input.ReceiptHandle);
        } else if (context.commandName === "ChangeMessageVisibilityBatchCommand") {
          const input = args.input as ChangeMessageVisibilityBatchRequest;
          const output = result.output as ChangeMessageVisibilityBatchResult;
          const changed = new Set((output.Successful ?? []).map((s) => s.Id));
          for (const entry of input.Entries ?? []) {
            if (entry.VisibilityTimeout === 0 && changed.has(entry.Id) && entry.ReceiptHandle)
              this.#visible.add(entry.ReceiptHandle);
          }
        }
        return result;
      },
      { step: "initialize", name: "jobfenceTestingVisibilityWatch" },
    );
  }

  /** Whether the watched client made the message received with `receiptHandle` visible again. */
  madeVisible(receiptHandle: string): boolean {
    return this.#visible.has(receiptHandle);
  }
}
