/**
 * An event-source poller that behaves like Lambda's SQS event source mapping: long-polls
 * ReceiveMessage with every attribute, hands the real handler a real-shaped SQS event, deletes
 * exactly the records not in batchItemFailures, with a bounded number of invocations at once.
 */
import type { Context } from "aws-lambda";
import { deliver, type QueueSource, receiveRecords, type SqsHandler } from "./event-source.ts";
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
}

/** A running poller. */
export interface Poller {
  /** Stops polling and waits for invocations in progress to finish. */
  stop(): Promise<void>;
}

const PAUSE_AFTER_ERROR_MS = 1000;

export function startPoller(options: PollerOptions): Poller {
  const abort = new AbortController();
  const worker = async (): Promise<void> => {
    while (!abort.signal.aborted) {
      try {
        const records = await receiveRecords(options.source, abort.signal);
        if (records.length === 0 || abort.signal.aborted) continue;
        const context: Context = lambdaContext(options.functionName, options.timeoutSeconds * 1000);
        await deliver(options.source, records, options.handler, context);
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
    },
  };
}
