/**
 * The follow-ups a consumer under test sends: one queue on the emulator per target its definition
 * declares (`sends`), and a reader that collects what arrived there, so a test asserts what its
 * work sent (and, by their absence, that a rolled-back job sent nothing).
 */
import { DeleteMessageBatchCommand, ReceiveMessageCommand, type SQSClient } from "@aws-sdk/client-sqs";
import { parseJson } from "../shared/envelope/parse-json.ts";
import { createTestQueue, type TestQueue } from "./queue.ts";

/** A follow-up as it arrived in its target's queue. */
export interface ReceivedFollowUp {
  /** The message body, parsed: the follow-up's job envelope. */
  readonly envelope: {
    readonly job_id: string;
    readonly tenant_id: string;
    readonly correlation_id?: string;
    readonly payload: unknown;
  };
  /** The message attributes' string values (the trace context among them). */
  readonly attributes: Readonly<Record<string, string>>;
}

/** Every target's queue, and what arrived in each. */
export class FollowUpInbox {
  readonly #sqs: SQSClient;
  readonly #queues: Map<string, TestQueue>;
  readonly #received = new Map<string, ReceivedFollowUp[]>();

  private constructor(sqs: SQSClient, queues: Map<string, TestQueue>) {
    this.#sqs = sqs;
    this.#queues = queues;
  }

  /** Creates a queue for each target (`<target>-follow-ups`; `.fifo` for the FIFO ones). */
  static async create(
    sqs: SQSClient,
    endpoint: string,
    targets: readonly string[],
    fifoTargets: ReadonlySet<string> = new Set(),
  ): Promise<FollowUpInbox> {
    const queues = new Map<string, TestQueue>();
    for (const target of targets) {
      const fifo = fifoTargets.has(target);
      queues.set(
        target,
        await createTestQueue(
          sqs,
          endpoint,
          `${target}-follow-ups${fifo ? ".fifo" : ""}`,
          fifo ? { FifoQueue: "true" } : {},
        ),
      );
    }
    return new FollowUpInbox(sqs, queues);
  }

  /** The queue URL of each target: the consumer's `outboxQueues`. */
  get queueUrls(): Record<string, string> {
    return Object.fromEntries([...this.#queues].map(([target, queue]) => [target, queue.url]));
  }

  /**
   * Everything that has arrived for `target` so far, in arrival order (a follow-up sent twice
   * appears twice: the target's fence is what absorbs it).
   */
  async of(target: string): Promise<ReceivedFollowUp[]> {
    const queue = this.#queues.get(target);
    if (!queue) throw new RangeError(`${target} is not a target of this consumer`);
    const received = this.#received.get(target) ?? [];
    this.#received.set(target, received);
    for (;;) {
      const { Messages = [] } = await this.#sqs.send(
        new ReceiveMessageCommand({
          QueueUrl: queue.url,
          MaxNumberOfMessages: 10,
          WaitTimeSeconds: 0,
          MessageAttributeNames: ["All"],
        }),
      );
      if (Messages.length === 0) return [...received];
      for (const message of Messages) {
        received.push({
          envelope: parseJson(message.Body ?? "null") as ReceivedFollowUp["envelope"],
          attributes: Object.fromEntries(
            Object.entries(message.MessageAttributes ?? {}).map(([name, value]) => [
              name,
              value.StringValue ?? "",
            ]),
          ),
        });
      }
      await this.#sqs.send(
        new DeleteMessageBatchCommand({
          QueueUrl: queue.url,
          Entries: Messages.map((m, i) => ({ Id: String(i), ReceiptHandle: m.ReceiptHandle })),
        }),
      );
    }
  }
}
