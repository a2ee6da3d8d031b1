/** Committing a fence transaction opened by hand in a test, as the harness commits it. */
import type pg from "pg";
import { type FencesInserted, fenceCommit } from "../../shared/db/queries/begin-with-fences.ts";

/**
 * The check and COMMIT of a transaction beginWithFences opened: migration 0023's deferred trigger
 * refuses any other COMMIT of a fence.
 */
export async function commitFences(client: pg.ClientBase, begun: FencesInserted): Promise<void> {
  await client.query(fenceCommit(begun));
}
