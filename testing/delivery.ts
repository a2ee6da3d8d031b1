/**
 * Delivering messages to a consumer under test the way Lambda's SQS event source does: send them
 * to the consumer's queue, receive them as real records (attributes, receive counts, receipt
 * handles), invoke the handler with the batch and delete exactly the records it acked. What became
 * of each message is read from the harness itself, through its outcome observer, not inferred
 * from the queue or the database.
 */
import {
  ChangeMessageVisibilityBatchCommand,
  SendMessageBatchCommand,
  type SendMessageBatchRequestEntry,
  type SQSClient,
} from "@aws-sdk/client-sqs";
import type { SQSRecord } from "aws-lambda";
import { deliver, receiveRecords } from "../local/event-source.ts";
import { lambdaContext } from "../local/lambda-context.ts";
import type { HostedConsumer, OutcomeObserver } from "../shared/consumer.ts";
import { messageIdStandIn } from "../shared/envelope/envelope.ts";
import { parseJson } from "../shared/envelope/parse-json.ts";
import type { ErrorKind } from "../shared/errors/error-kind.ts";
import type { RecordOutcome } from "../shared/record/outcome.ts";
import { whoFailed } from "../shared/record/record-context.ts";
import type { TestQueue } from "./queue.ts";
import type { VisibilityWatch } from "./visibility.ts";

/**
 * A message to deliver: an envelope (any object, sent as its JSON) or a body sent exactly as
 * given, for testing what the harness makes of a body that is not a job.
 */
export type TestMessage = object | string;

/**
 * What became of a message: its {@link RecordOutcome}'s status when the harness reported one;
 * otherwise `returned` when the harness handed it back to the queue unrun, or `unobserved`.
 */
export type MessageStatus = RecordOutcome["status"] | "returned" | "unobserved";

/** One message of a delivery. */
export interface MessageResult {
  readonly messageId: string;
  readonly body: string;
  /**
   * The job id the harness knew the message by: the envelope's, or for a body without a usable one
   * the stand-in its dead letter is filed under.
   */
  readonly jobId: string;
  /** The delivery's ApproximateReceiveCount: 1 on the first delivery, one more on each redelivery. */
  readonly receiveCount: number;
  /**
   * `applied`, `duplicate`, `dead-lettered` (all acked), `retry` (a transient failure, hidden for
   * its backoff), `held` (behind another delivery of the job), `interrupted`, `dead-letter-failed`,
   * `failed`; `returned` when the harness handed it back to the queue unrun, visible again at once
   * and with no attempt spent (the rest of a FIFO group behind a failure, or a record the invocation
   * had too little time left to start); `unobserved` when the invocation's time ran out before the
   * record reported an outcome (the function timeout, or the harness's return reserve while it ran).
   */
  readonly status: MessageStatus;
  /** Whether it was deleted from the queue. */
  readonly acked: boolean;
  /** The dead letter's error kind, when dead-lettered (or its write failed). */
  readonly kind?: ErrorKind;
  /** The dead letter's id, when dead-lettered. */
  readonly deadLetterId?: string;
  /** The error behind a retry, a dead letter or a failure. */
  readonly error?: unknown;
  /** The outcome as the harness reported it; undefined when `returned` or `unobserved`. */
  readonly outcome?: RecordOutcome;
}

/** What one delivery did. */
export interface Delivery {
  /** One result per message given, in the order given. */
  readonly results: readonly MessageResult[];
  /**
   * Records of other messages the same receives returned (an earlier message back from its retry
   * delay, say), handled as Lambda would handle them.
   */
  readonly others: readonly MessageResult[];
  /** Of all of them: applied. */
  readonly applied: readonly MessageResult[];
  /** Of all of them: duplicates of an applied job, absorbed. */
  readonly duplicates: readonly MessageResult[];
  /** Of all of them: transient failures left in the queue for a retry. */
  readonly retried: readonly MessageResult[];
  /** Of all of them: recorded as dead letters (see `kind`). */
  readonly deadLettered: readonly MessageResult[];
  /** Of all of them: handed back to the queue unrun, for the next receive to take. */
  readonly returned: readonly MessageResult[];
  /** Of all of them: still in the queue (retried, held, returned, interrupted, failed, unobserved). */
  readonly unacked: readonly MessageResult[];
  /** Handler invocations it took (a batch holds at most the kit's batch size). */
  readonly invocations: number;
}

/** Collects the outcomes the harness reports, by SQS message id. */
export class OutcomeRecorder {
  readonly #seen = new Map<string, { outcome: RecordOutcome; jobId: string }>();

  /** The observer to give the consumer (`onOutcome`). */
  readonly observer: OutcomeObserver = (outcome, rc) => {
    this.#seen.set(rc.record.messageId, { outcome, jobId: whoFailed(rc).identity.jobId });
  };

  /** The outcome reported for `messageId` since the last take, and forgets it. */
  take(messageId: string): { outcome: RecordOutcome; jobId: string } | undefined {
    const seen = this.#seen.get(messageId);
    this.#seen.delete(messageId);
    return seen;
  }
}

/** How a {@link QueueDriver} delivers. */
export interface QueueDriverOptions {
  readonly sqs: SQSClient;
  readonly queue: TestQueue;
  readonly handler: HostedConsumer;
  readonly recorder: OutcomeRecorder;
  /** Watches the handler's SQS client: which records it made visible again. */
  readonly visibility: VisibilityWatch;
  /** Whether the queue is FIFO: sends then carry a group and a deduplication id. */
  readonly fifo: boolean;
  /** A FIFO message's group. */
  readonly groupOf: (message: TestMessage) => string;
  /** Records per invocation, at most (1–10). */
  readonly batchSize: number;
  /** How long to wait for a sent message to be received before giving up. */
  readonly receiveTimeoutMs: number;
}

/** SQS's most entries per batch call. */
const SQS_BATCH = 10;

/**
 * A visibility change's failure for a message that is no longer in flight under the handle (it is
 * visible again: returned, or its visibility timeout ended): fauxqs's code, and SQS's.
 */
const NOT_IN_FLIGHT = new Set([
  "ReceiptHandleIsInvalid",
  "MessageNotInflight",
  "AWS.SimpleQueueService.MessageNotInflight",
]);

/** Sends, receives and invokes, and remembers what the handler left in the queue. */
export class QueueDriver {
  readonly #o: QueueDriverOptions;
  /**
   * Received and not acked, by message id, with the receipt handle of its last receive: what
   * {@link QueueDriver.redeliver} brings back.
   */
  readonly #unacked = new Map<string, string>();
  #sequence = 0;

  constructor(options: QueueDriverOptions) {
    this.#o = options;
  }

  /** Message ids received and left in the queue. */
  get unacked(): readonly string[] {
    return [...this.#unacked.keys()];
  }

  /** Sends the messages, then delivers batches until every one of them has been handled once. */
  async deliver(messages: readonly TestMessage[]): Promise<Delivery> {
    const ids = await this.#send(messages);
    return this.#handleUntil(ids);
  }

  /**
   * Delivers again every message a delivery left in the queue, at once: their visibility is set to
   * 0 rather than waited out, so a retry or an exhaustion is one call, whatever the backoff. A
   * message already visible again (the harness returned it) is left as it is: its receipt handle
   * is stale, and the next receive takes it anyway.
   */
  async redeliver(): Promise<Delivery> {
    const pending = [...this.#unacked];
    const hidden = pending.filter(([, receiptHandle]) => !this.#o.visibility.madeVisible(receiptHandle));
    for (let i = 0; i < hidden.length; i += SQS_BATCH) {
      const chunk = hidden.slice(i, i + SQS_BATCH);
      const answer = await this.#o.sqs.send(
        new ChangeMessageVisibilityBatchCommand({
          QueueUrl: this.#o.queue.url,
          Entries: chunk.map(([, receiptHandle], j) => ({
            Id: String(j),
            ReceiptHandle: receiptHandle,
            VisibilityTimeout: 0,
          })),
        }),
      );
      // A message no longer in flight under its handle is visible again already (its visibility
      // timeout ended, or the harness returned it in a way the watch could not confirm).
      const failed = (answer.Failed ?? []).filter((f) => !NOT_IN_FLIGHT.has(f.Code ?? ""));
      if (failed.length > 0)
        throw new Error(`could not make messages visible again: ${failed[0]?.Message ?? "unknown"}`);
    }
    return this.#handleUntil(pending.map(([id]) => id));
  }

  async #send(messages: readonly TestMessage[]): Promise<string[]> {
    const ids: string[] = [];
    for (let i = 0; i < messages.length; i += SQS_BATCH) {
      const entries: SendMessageBatchRequestEntry[] = messages.slice(i, i + SQS_BATCH).map((message, j) => ({
        Id: String(j),
        MessageBody: typeof message === "string" ? message : JSON.stringify(message),
        // A fresh deduplication id per send: the test is of the fence's deduplication, so SQS's
        // own must never swallow a repeated body first.
        ...(this.#o.fifo
          ? {
              MessageGroupId: this.#o.groupOf(message),
              MessageDeduplicationId: `kit-${process.pid}-${++this.#sequence}-${Date.now()}`,
            }
          : {}),
      }));
      const answer = await this.#o.sqs.send(
        new SendMessageBatchCommand({ QueueUrl: this.#o.queue.url, Entries: entries }),
      );
      if (answer.Failed && answer.Failed.length > 0)
        throw new Error(`the emulator refused a message: ${answer.Failed[0]?.Message ?? "unknown"}`);
      const byEntry = new Map((answer.Successful ?? []).map((s) => [s.Id, s.MessageId]));
      for (const entry of entries) {
        const id = byEntry.get(entry.Id);
        if (!id) throw new Error("SendMessageBatch returned no MessageId for a message");
        ids.push(id);
      }
    }
    return ids;
  }

  /** Receives and invokes until each of `ids` has been handled once. */
  async #handleUntil(ids: readonly string[]): Promise<Delivery> {
    const waiting = new Set(ids);
    const mine = new Map<string, MessageResult>();
    const others: MessageResult[] = [];
    let invocations = 0;
    const deadline = Date.now() + this.#o.receiveTimeoutMs;
    while (waiting.size > 0) {
      const records = await receiveRecords({
        sqs: this.#o.sqs,
        queueUrl: this.#o.queue.url,
        queueArn: this.#o.queue.arn,
        batchSize: this.#o.batchSize,
      });
      if (records.length === 0) {
        if (Date.now() > deadline) throw this.#notReceived(waiting);
        await new Promise((resolve) => setTimeout(resolve, 25));
        continue;
      }
      invocations++;
      for (const result of await this.#invoke(records)) {
        if (waiting.delete(result.messageId)) mine.set(result.messageId, result);
        else others.push(result);
      }
    }
    const results = ids.map((id) => mine.get(id) as MessageResult);
    return summarize(results, others, invocations);
  }

  /** One invocation, as the event source makes it. */
  async #invoke(records: readonly SQSRecord[]): Promise<MessageResult[]> {
    const { handler, recorder } = this.#o;
    const delivered = await deliver(
      { sqs: this.#o.sqs, queueUrl: this.#o.queue.url, queueArn: this.#o.queue.arn },
      records,
      handler,
      lambdaContext(handler.consumer, handler.config.functionTimeoutSeconds * 1000),
    );
    const deleted = new Set(delivered.deletedIds);
    return records.map((record) => {
      const acked = deleted.has(record.messageId);
      if (acked) this.#unacked.delete(record.messageId);
      else this.#unacked.set(record.messageId, record.receiptHandle);
      const seen = recorder.take(record.messageId);
      // No outcome, and the harness made it visible again within an invocation that returned in
      // time: handed back unrun (return-to-queue.ts), not a timeout.
      const returned =
        !acked && !seen && !delivered.timedOut && this.#o.visibility.madeVisible(record.receiptHandle);
      return resultOf(record, acked, seen, returned);
    });
  }

  #notReceived(waiting: ReadonlySet<string>): Error {
    return new Error(
      `${waiting.size} message(s) were not received within ${this.#o.receiveTimeoutMs} ms` +
        (this.#o.fifo
          ? ": on a FIFO queue, an earlier message of the same group left in the queue (a retry) holds " +
            "the group back until it is handled; redeliver() it first"
          : ""),
    );
  }
}

function resultOf(
  record: SQSRecord,
  acked: boolean,
  seen: { outcome: RecordOutcome; jobId: string } | undefined,
  returned: boolean,
): MessageResult {
  const outcome = seen?.outcome;
  return {
    messageId: record.messageId,
    body: record.body,
    jobId: seen?.jobId ?? jobIdOfBody(record),
    receiveCount: Number(record.attributes.ApproximateReceiveCount),
    status: outcome?.status ?? (returned ? "returned" : "unobserved"),
    acked,
    ...(outcome && "kind" in outcome ? { kind: outcome.kind } : {}),
    ...(outcome?.status === "dead-lettered" ? { deadLetterId: outcome.deadLetterId } : {}),
    ...(outcome && "error" in outcome ? { error: outcome.error } : {}),
    ...(outcome ? { outcome } : {}),
  };
}

/** The job id of a record that reported no outcome, as the harness would have read it. */
function jobIdOfBody(record: SQSRecord): string {
  try {
    const parsed: unknown = parseJson(record.body);
    const jobId = (parsed as { job_id?: unknown } | null)?.job_id;
    if (typeof jobId === "string") return jobId;
  } catch {
    // Not JSON: the stand-in below, as for a dead letter.
  }
  return messageIdStandIn(record.messageId);
}

function summarize(
  results: readonly MessageResult[],
  others: readonly MessageResult[],
  invocations: number,
): Delivery {
  const all = [...results, ...others];
  const withStatus = (status: MessageStatus) => all.filter((r) => r.status === status);
  return {
    results,
    others,
    applied: withStatus("applied"),
    duplicates: withStatus("duplicate"),
    retried: withStatus("retry"),
    deadLettered: withStatus("dead-lettered"),
    returned: withStatus("returned"),
    unacked: all.filter((r) => !r.acked),
    invocations,
  };
}
