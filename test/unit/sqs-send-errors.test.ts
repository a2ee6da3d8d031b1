/**
 * What an SQS call's error says (shared/sqs/send-errors.ts): whether to send the same request
 * again, and its code. The producer and the replay sender both decide with these.
 */
import { describe, expect, it } from "vitest";
import { errorCode, isTransientSendError } from "../../shared/sqs/send-errors.ts";

const named = (name: string, extra: object = {}) => Object.assign(new Error(name), { name, ...extra });
const nodeError = (code: string) => Object.assign(new Error(code), { code });

describe("isTransientSendError", () => {
  it("retries throttling, server faults, timeouts and the network; not a request SQS refuses", () => {
    expect(
      isTransientSendError(
        named("ThrottlingException", { $fault: "client", $retryable: { throttling: true } }),
      ),
    ).toBe(true);
    expect(isTransientSendError(named("RequestThrottled", { $fault: "client" }))).toBe(true);
    expect(isTransientSendError(named("InternalError", { $fault: "server" }))).toBe(true);
    expect(isTransientSendError(named("TimeoutError"))).toBe(true);
    expect(isTransientSendError(nodeError("ECONNREFUSED"))).toBe(true);
    expect(isTransientSendError(named("Unknown", { $metadata: { httpStatusCode: 503 } }))).toBe(true);
    expect(isTransientSendError(named("QueueDoesNotExist", { $fault: "client" }))).toBe(false);
    expect(isTransientSendError(named("BatchRequestTooLong", { $fault: "client" }))).toBe(false);
    expect(
      isTransientSendError(named("AccessDenied", { $fault: "client", $metadata: { httpStatusCode: 403 } })),
    ).toBe(false);
    expect(isTransientSendError(undefined)).toBe(false);
  });

  it("retries what the replay sender retried: every network failure, a retryable SDK error", () => {
    for (const code of ["ECONNRESET", "EPIPE", "ENOTFOUND", "EAI_AGAIN", "ETIMEDOUT"])
      expect(isTransientSendError(nodeError(code))).toBe(true);
    expect(isTransientSendError(named("NetworkingError"))).toBe(true);
    // Node's "socket hang up" carries ECONNRESET.
    expect(isTransientSendError(Object.assign(new Error("socket hang up"), { code: "ECONNRESET" }))).toBe(
      true,
    );
    expect(isTransientSendError(named("Whatever", { $retryable: {} }))).toBe(true);
    expect(isTransientSendError(named("TooManyRequests", { $metadata: { httpStatusCode: 429 } }))).toBe(true);
    expect(isTransientSendError(named("InvalidParameterValue", { $fault: "client" }))).toBe(false);
    expect(isTransientSendError(null)).toBe(false);
    expect(isTransientSendError("ECONNRESET")).toBe(false);
  });
});

describe("errorCode", () => {
  it("names an SQS error by its name, a Node error by its code", () => {
    const sdk = Object.assign(new Error("x"), {
      name: "QueueDoesNotExist",
      Code: "AWS.SimpleQueueService.NonExistentQueue",
      $fault: "client",
    });
    expect(errorCode(sdk)).toBe("QueueDoesNotExist");
    expect(errorCode(nodeError("ECONNREFUSED"))).toBe("ECONNREFUSED");
    expect(errorCode(Object.assign(new Error("t"), { name: "TimeoutError" }))).toBe("TimeoutError");
    expect(errorCode("just a string")).toBe("Error");
    expect(errorCode(undefined)).toBe("Error");
  });
});
