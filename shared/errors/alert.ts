/** The ops bus refused an alert. */
import { JobfenceError } from "./jobfence-error.ts";

/** EventBridge accepted the PutEvents call but refused the entry. */
export class AlertRejectedError extends JobfenceError {
  override name = "AlertRejectedError";
}
