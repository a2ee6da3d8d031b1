/**
 * What an error from an SQS call says: whether the same request may succeed if sent again, and
 * its code. Pure.
 */

/**
 * Whether a whole-request error may pass if the same request is sent again: throttling, an SQS
 * 5xx, a timeout, the network. Anything else (a queue that does not exist, access denied, a
 * request SQS finds malformed) would fail the same way again.
 */
export function isTransientSendError(error: unknown): boolean {
  const e = error as {
    $fault?: unknown;
    $retryable?: unknown;
    $metadata?: { httpStatusCode?: unknown };
    name?: unknown;
    code?: unknown;
  } | null;
  if (e === null || typeof e !== "object") return false;
  if (e.$fault === "server" || e.$retryable) return true;
  const status = e.$metadata?.httpStatusCode;
  if (typeof status === "number" && (status === 429 || status >= 500)) return true;
  return /Throttl|RequestThrottled|OverLimit|Timeout|Networking|ECONN|EPIPE|ENOTFOUND|EAI_AGAIN|ETIMEDOUT|socket hang up/i.test(
    `${String(e.name)} ${String(e.code)}`,
  );
}

/**
 * An error's code: an SQS error's name (`QueueDoesNotExist`, not the legacy
 * `AWS.SimpleQueueService.NonExistentQueue` it may also carry), a Node error's code (`ECONNREFUSED`).
 * Never the queue URL nor SQS's text, so an operator may see it.
 */
export function errorCode(error: unknown): string {
  const e = error as { $fault?: unknown; Code?: unknown; code?: unknown; name?: unknown } | null;
  const candidates = e?.$fault !== undefined ? [e?.name, e?.Code] : [e?.code, e?.Code, e?.name];
  for (const candidate of candidates) {
    if (typeof candidate === "string" && candidate.length > 0 && candidate !== "Error") return candidate;
  }
  return "Error";
}
