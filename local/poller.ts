/**
 * An event-source poller that behaves like Lambda's SQS event source mapping: long-polls
 * ReceiveMessage with every attribute, hands the real handler a real-shaped SQS event, deletes
 * exactly the records not in batchItemFailures, with a bounded number of invocations at once. An
 * invocation that outlives the function timeout deletes nothing (local/event-source.ts) and frees
 * its slot, as a timed-out Lambda invocation does; its batch comes back after the visibility timeout.
 *
 * Its invocations run at once in one process, as on Lambda Managed Instances, so it runs each the
 * way that runtime does: inside a per-invocation store of its own (local/invoke-store.ts), so that
 * Powertools' logs and metrics of one invocation carry its own request id and none of another's.
 */
import type { Context, SQSRecord } from "aws-lambda";
import { deliver, type QueueSource, receiveRecords, type SqsHandler } from "./event-source.ts";
import { concurrentInvocations } from "./invoke-store.ts";
import { lambdaContext } from "./lambda-context.ts";

/** Options of {@link startPoller}. */
export interface PollerOptions {
  readonly source: QueueSource;
  readonly handler: SqsHandler;
  /** The function name the Lambda context carries. */
  readonly functionName: string;
  /** Invocations at once (Lambda's maximum concurrency for the mapping). */
  readonly concurrency: number;
  /** The function timeout, for the context's remaining time. */
  readonly timeoutSeconds: number;
  /** Told about a failed receive, invocation or delete; the poller goes on after a pause. */
  readonly onError: (error: unknown) => void;
  /**
   * Told about an invocation that timed out; the poller goes on at once. Without it a timeout is
   * reported to `onError`, as an {@link InvocationTimeoutError} (and the poller goes on at once).
   */
  readonly onTimeout?: (timeout: InvocationTimeout) => void;
}

/** An invocation that did not return within the function timeout. */
export interface InvocationTimeout {
  readonly functionName: string;
  readonly timeoutMs: number;
  /** Its batch: none was deleted, every record comes back after the visibility timeout. */
  readonly records: readonly SQSRecord[];
}

/** What `onError` is told of a timed-out invocation when the poller has no `onTimeout`. */
export class InvocationTimeoutError extends Error {
  readonly timeout: InvocationTimeout;
  constructor(timeout: InvocationTimeout) {
    super(
      `${timeout.functionName} timed out after ${timeout.timeoutMs} ms; its ${timeout.records.length} ` +
        "message(s) come back after the visibility timeout",
    );
    this.name = "InvocationTimeoutError";
    this.timeout = timeout;
  }
}

/** A running poller. */
export interface Poller {
  /**
   * Stops polling and waits for invocations in progress to finish or time out (a timed-out
   * handler may still be running: see local/event-source.ts).
   */
  stop(): Promise<void>;
}

const PAUSE_AFTER_ERROR_MS = 1000;

export function startPoller(options: PollerOptions): Poller {
  const abort = new AbortController();
  const invocations = concurrentInvocations(options.concurrency);
  const worker = async (): Promise<void> => {
    while (!abort.signal.aborted) {
      try {
        const records = await receiveRecords(options.source, abort.signal);
        if (records.length === 0 || abort.signal.aborted) continue;
        const timeoutMs = options.timeoutSeconds * 1000;
        const context: Context = lambdaContext(options.functionName, timeoutMs);
        const handler: SqsHandler = (event, ctx) => invocations.run(ctx, () => options.handler(event, ctx));
        const delivered = await deliver(options.source, records, handler, context, { timeoutMs });
        if (delivered.timedOut) {
          const timeout = { functionName: options.functionName, timeoutMs, records };
          if (options.onTimeout) options.onTimeout(timeout);
          else options.onError(new InvocationTimeoutError(timeout));
        }
      } catch (error) {
        if (abort.signal.aborted) break;
        options.onError(error);
        await new Promise((resolve) => setTimeout(resolve, PAUSE_AFTER_ERROR_MS));
      }
    }
  };
  const workers = Array.from({ length: options.concurrency }, () => worker());
  return {
    async stop() {
      abort.abort();
      await Promise.allSettled(workers);
      invocations.release();
    },
  };
}
