/**
 * Middleware: the fence transaction, steps 2 and 4 of the record protocol around the
 * work (step 3, the handler): the fence before the work, COMMIT after it, ROLLBACK on any error.
 * The protocol holds the transaction (shared/fence/fence-transaction.ts); this only calls it.
 */
import type { MiddlewareObj } from "@middy/core";
import type { RecordContext, RecordOutcome } from "../record/record-context.ts";

/** The steps this middleware calls (RecordProtocol.fence, commit, abandon). */
export interface FenceSteps<P> {
  fence(rc: RecordContext<P>): Promise<void>;
  commit(rc: RecordContext<P>): Promise<void>;
  /** Returns the error the failure becomes, when rolling back found it is no longer the work's. */
  abandon(rc: RecordContext<P>): Promise<Error | undefined>;
}

/** `before`: fence; `after`: commit; `onError`: roll back. */
export function fenceTransaction<P>(protocol: FenceSteps<P>): MiddlewareObj<RecordContext<P>, RecordOutcome> {
  type Req = { event: RecordContext<P>; error?: unknown };
  const fenceTransactionBefore = (request: Req) => protocol.fence(request.event);
  const fenceTransactionAfter = (request: Req) => protocol.commit(request.event);
  const fenceTransactionOnError = async (request: Req) => {
    const replaced = await protocol.abandon(request.event);
    if (replaced) request.error = replaced;
  };
  return {
    name: "jobfence-fence-transaction",
    before: fenceTransactionBefore,
    after: fenceTransactionAfter,
    onError: fenceTransactionOnError,
  };
}
