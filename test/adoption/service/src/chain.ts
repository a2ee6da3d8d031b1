/**
 * The service's own Middy chain around jobfence's middlewares: Powertools' Logger at the edge, and
 * an audit middleware of the service's that sees every record's outcome.
 */
import { Logger } from "@aws-lambda-powertools/logger";
import { injectLambdaContext } from "@aws-lambda-powertools/logger/middleware";
import middy, { type MiddlewareObj } from "@middy/core";
import {
  fenceTransaction,
  type PreparedConsumer,
  recordDeadLetter,
  runWork,
  sqsRecords,
  validateJob,
} from "jobfence/middy";
import type { paymentPayload } from "./consumer.js";

export const logger = new Logger({ serviceName: "billing" });

/** What the audit middleware saw, per record: the service's own bookkeeping. */
export const audited: string[] = [];

function audit(): MiddlewareObj {
  return {
    after: async (request) => {
      audited.push(`after:${(request.response as { status?: string } | undefined)?.status ?? "?"}`);
    },
    onError: async () => {
      audited.push("error");
    },
  };
}

/** The Lambda handler over a prepared consumer. */
export function paymentChain(consumer: PreparedConsumer<typeof paymentPayload>) {
  const perRecord = middy(runWork(consumer))
    .use(audit())
    .use(recordDeadLetter(consumer))
    .use(validateJob(consumer))
    .use(fenceTransaction(consumer));
  return middy(sqsRecords(consumer, perRecord)).use(injectLambdaContext(logger));
}
