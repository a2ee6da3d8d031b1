/**
 * Middleware: the fence transaction, steps 2 and 4 of the spine around what is inside it (the work,
 * and any middleware the user puts between): `before` opens the fence, `after` commits, `onError`
 * rolls back. The spine holds the transaction; this only calls it.
 */
import type { MiddlewareObj } from "@middy/core";
import type { RecordOutcome } from "../record/outcome.ts";
import type { RecordContext } from "../record/record-context.ts";
import type { SpineOf } from "./spine-of.ts";

/** Opens, commits and rolls back each record's fence transaction. */
export function fenceTransaction<P>(consumer: SpineOf<P>): MiddlewareObj<RecordContext<P>, RecordOutcome> {
  type Request = { event: RecordContext<P>; error?: unknown };
  const fenceTransactionBefore = (request: Request) => consumer.spine.fence(request.event);
  const fenceTransactionAfter = (request: Request) => consumer.spine.commit(request.event);
  const fenceTransactionOnError = async (request: Request) => {
    const replaced = await consumer.spine.abandon(request.event);
    if (replaced) request.error = replaced;
  };
  return {
    name: "jobfence-fence-transaction",
    before: fenceTransactionBefore,
    after: fenceTransactionAfter,
    onError: fenceTransactionOnError,
  };
}
