/** A Lambda `Context` for invoking handlers outside Lambda, with a real remaining-time clock. */
import { randomUUID } from "node:crypto";
import type { Context } from "aws-lambda";
import { LOCAL_ACCOUNT, LOCAL_REGION } from "./aws-clients.ts";

export function lambdaContext(functionName: string, timeoutMs = 30_000): Context {
  const deadline = Date.now() + timeoutMs;
  return {
    callbackWaitsForEmptyEventLoop: false,
    functionName,
    functionVersion: "$LATEST",
    invokedFunctionArn: `arn:aws:lambda:${LOCAL_REGION}:${LOCAL_ACCOUNT}:function:${functionName}`,
    memoryLimitInMB: "512",
    awsRequestId: randomUUID(),
    logGroupName: `/aws/lambda/${functionName}`,
    logStreamName: "local",
    getRemainingTimeInMillis: () => Math.max(0, deadline - Date.now()),
    done: () => {},
    fail: () => {},
    succeed: () => {},
  };
}
