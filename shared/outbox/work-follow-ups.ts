/**
 * A consumer's follow-ups on the record path: the `tx` its work is given (the fence transaction's
 * queries, and `send`, which stages each follow-up in that transaction) and the relay that sends
 * what a committed transaction wrote to the outbox.
 */
import type { Logger } from "@aws-lambda-powertools/logger";
import type { Metrics } from "@aws-lambda-powertools/metrics";
import type { SQSClient } from "@aws-sdk/client-sqs";
import type pg from "pg";
import type { StagedFollowUp } from "../db/queries/insert-follow-ups.ts";
import type { Job } from "../envelope/envelope.ts";
import { describeError } from "../errors/last-error.ts";
import type { FenceTransaction } from "../fence/fence-transaction.ts";
import type { WorkQueries } from "../fence/work-transaction.ts";
import {
  type FollowUpSchemas,
  followUpSender,
  refuseFollowUps,
  type SenderSpec,
  type SendFollowUp,
} from "./follow-up.ts";
import { relayAfterCommit, type TargetQueues } from "./relay.ts";

/**
 * What the work gets: the fence transaction's `query`, and `send` for the follow-ups its consumer
 * declares (`sends`): each is written to the outbox in this transaction and sent once it commits
 * (shared/outbox/). Returns the follow-up's job id.
 */
export type Transaction<F extends FollowUpSchemas = Record<never, never>> = WorkQueries & {
  readonly send: SendFollowUp<F>;
};

/** What the follow-ups of a consumer need. */
export interface FollowUpOptions {
  readonly consumer: string;
  /** The follow-ups the consumer may send and each target's queue. @default none: `tx.send` refuses */
  readonly followUps?: SenderSpec & { readonly queues: TargetQueues };
  readonly pool: pg.Pool;
  readonly sqs: SQSClient;
  readonly metrics: Metrics;
  readonly logger: Logger;
}

/** One per consumer; no state of its own between records. */
export class WorkFollowUps {
  readonly #o: FollowUpOptions;
  /** The `send` of a consumer that declares no follow-ups: the same for every job, made once. */
  readonly #refuse: Transaction<FollowUpSchemas>["send"];

  constructor(options: FollowUpOptions) {
    this.#o = options;
    this.#refuse = refuseFollowUps(options.consumer);
  }

  /** What the work of `job` is given on `fence`, its follow-ups carrying `traceparent`. */
  transaction(
    fence: FenceTransaction,
    job: Job<unknown>,
    traceparent: string | null,
  ): Transaction<FollowUpSchemas> {
    const { followUps } = this.#o;
    const send = followUps
      ? followUpSender(
          followUps,
          job,
          traceparent,
          (f) => fence.stage(f),
          (refused) => fence.refuse(refused),
        )
      : this.#refuse;
    return Object.freeze({ query: fence.tx.query, send }) as Transaction<FollowUpSchemas>;
  }

  /**
   * Sends what a committed transaction wrote to the outbox (per-record: its record's; batch mode:
   * the batch's). Never throws: what it cannot send waits for the scheduled relay.
   */
  async relay(
    staged: readonly StagedFollowUp[],
    logKeys: Readonly<Record<string, unknown>> = {},
  ): Promise<void> {
    const target = this.#o.followUps;
    if (staged.length === 0 || !target) return;
    const { pool, sqs, consumer, metrics, logger } = this.#o;
    try {
      await relayAfterCommit(
        { pool, sqs, consumer, queues: target.queues, metrics, logger },
        staged,
        logKeys,
      );
    } catch (error) {
      // The effect committed and its rows are in the outbox: the scheduled relay sends them.
      logger.error("relay after COMMIT failed; the scheduled relay sends the follow-ups", {
        ...logKeys,
        error: describeError(error),
      });
    }
  }
}
