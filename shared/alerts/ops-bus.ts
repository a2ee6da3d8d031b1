/**
 * The alert (docs/design.md §8.1): after a dead letter commits, `DeadLetterRecorded` goes to the ops
 * EventBridge bus (routed to BetterStack by the CDK). Dead letters alert through observability,
 * never through a domain bus, so no domain consumer can react to queue failures in a loop.
 */
import { type EventBridgeClient, PutEventsCommand } from "@aws-sdk/client-eventbridge";
import { AlertRejectedError } from "../errors/alert.ts";
import type { ErrorKind } from "../errors/error-kind.ts";
import type { LastError } from "../errors/last-error.ts";

/** `source` of every jobfence event on the ops bus. */
export const EVENT_SOURCE = "jobfence";
/** `detail-type` of the alert for a new dead letter. */
export const DEAD_LETTER_RECORDED = "DeadLetterRecorded";
/** Alerts carry a short error: the row has the rest. */
export const ALERT_ERROR_MESSAGE_MAX = 500;

/** The event's detail. */
export interface DeadLetterRecordedDetail {
  readonly id: string;
  readonly consumer: string;
  readonly queue: string;
  readonly job_id: string;
  readonly error_kind: ErrorKind;
  readonly attempts: number;
  readonly correlation_id: string;
  readonly last_error: { readonly class: string; readonly message: string };
  /** False when this write found the job's pending dead letter already recorded (a redelivery). */
  readonly first_recorded: boolean;
  /** The fingerprint (hex) of the job the message carried, when its envelope could be read. */
  readonly job_fingerprint: string | null;
  /** Conflicts: the fingerprint (hex) of the applied job whose id the message shares. */
  readonly fence_fingerprint: string | null;
}

/** The detail for a recorded dead letter, with the error message truncated. */
export function deadLetterRecordedDetail(
  fields: Omit<DeadLetterRecordedDetail, "last_error"> & { lastError: LastError },
): DeadLetterRecordedDetail {
  const { lastError, ...rest } = fields;
  const message =
    lastError.message.length > ALERT_ERROR_MESSAGE_MAX
      ? `${lastError.message.slice(0, ALERT_ERROR_MESSAGE_MAX - 1)}…`
      : lastError.message;
  return { ...rest, last_error: { class: lastError.class, message } };
}

/**
 * Publishes one event to the ops bus: the one publisher of every jobfence alert. Throws when the
 * call fails or EventBridge refuses the entry (a PutEvents answer can be 200 with the entry failed).
 */
export async function publishOpsEvent(
  client: EventBridgeClient,
  busName: string,
  detailType: string,
  detail: unknown,
  signal?: AbortSignal,
): Promise<void> {
  const result = await client.send(
    new PutEventsCommand({
      Entries: [
        {
          EventBusName: busName,
          Source: EVENT_SOURCE,
          DetailType: detailType,
          Detail: JSON.stringify(detail),
        },
      ],
    }),
    // Aborted with the record's invocation: the SDK's own retries must not send after it returned.
    signal ? { abortSignal: signal } : {},
  );
  if ((result.FailedEntryCount ?? 0) > 0) {
    const entry = result.Entries?.[0];
    throw new AlertRejectedError(
      `EventBridge refused the ${detailType} event: ${entry?.ErrorCode ?? "unknown"} ${entry?.ErrorMessage ?? ""}`.trim(),
    );
  }
}

/** Publishes one `DeadLetterRecorded`. */
export function publishDeadLetterRecorded(
  client: EventBridgeClient,
  busName: string,
  detail: DeadLetterRecordedDetail,
  signal?: AbortSignal,
): Promise<void> {
  return publishOpsEvent(client, busName, DEAD_LETTER_RECORDED, detail, signal);
}
