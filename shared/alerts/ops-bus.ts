/**
 * The alert half of SPEC §8: after a dead letter commits, `DeadLetterRecorded` goes to the ops
 * EventBridge bus (routed to BetterStack by the CDK). Dead letters alert through observability,
 * never through a domain bus, so no domain consumer can react to queue failures in a loop.
 */
import { type EventBridgeClient, PutEventsCommand } from "@aws-sdk/client-eventbridge";
import type { ErrorKind } from "../dead-letters/error-kind.ts";
import type { LastError } from "../dead-letters/last-error.ts";

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
}

/** Thrown when EventBridge accepted the call but not the entry. */
export class AlertRejectedError extends Error {
  override name = "AlertRejectedError";
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

/** Publishes one `DeadLetterRecorded`; throws when the call fails or the entry is refused. */
export async function publishDeadLetterRecorded(
  client: EventBridgeClient,
  busName: string,
  detail: DeadLetterRecordedDetail,
): Promise<void> {
  const result = await client.send(
    new PutEventsCommand({
      Entries: [
        {
          EventBusName: busName,
          Source: EVENT_SOURCE,
          DetailType: DEAD_LETTER_RECORDED,
          Detail: JSON.stringify(detail),
        },
      ],
    }),
  );
  if ((result.FailedEntryCount ?? 0) > 0) {
    const entry = result.Entries?.[0];
    throw new AlertRejectedError(
      `EventBridge refused the alert: ${entry?.ErrorCode ?? "unknown"} ${entry?.ErrorMessage ?? ""}`.trim(),
    );
  }
}
