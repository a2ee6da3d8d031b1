/**
 * How a fence transaction's pooled connection goes back: after a server's answer it is rolled back
 * (with the session resets when the work may have changed the session) and released; after
 * anything else (a broken socket, a timeout) its state is unknown, so it is destroyed.
 */
import pg from "pg";
import { RESET_FENCE_SESSION } from "../db/queries/begin-with-fences.ts";

/** The session resets after a ROLLBACK, in the same message (the COMMIT's check runs them itself). */
export const AFTER_ROLLBACK_RESET = `;\n${RESET_FENCE_SESSION}`;

/**
 * Ends the loan after an error: a server's answer (an error with an SQLSTATE) skipped the rest of
 * its message, the session resets among it, and leaves the connection usable once rolled back and
 * reset; anything else (a broken socket, a timeout) leaves its state unknown, so it is destroyed.
 */
export async function endLoan(client: pg.PoolClient, error: unknown, reset: boolean): Promise<void> {
  if (error instanceof pg.DatabaseError) {
    await rollBackAndRelease(client, reset);
  } else {
    client.release(asError(error));
  }
}

/** ROLLBACK (and the session resets when the work may have changed the session), then release. */
export async function rollBackAndRelease(client: pg.PoolClient, reset: boolean): Promise<void> {
  try {
    await client.query(reset ? `ROLLBACK${AFTER_ROLLBACK_RESET}` : "ROLLBACK");
    if (reset) forgetPreparedStatements(client);
    client.release();
  } catch (rollbackError) {
    client.release(asError(rollbackError));
  }
}

/**
 * DEALLOCATE ALL dropped the session's prepared statements, the ones pg prepared for named queries
 * among them: pg's record of them goes too, or it would bind to statements that no longer exist.
 */
export function forgetPreparedStatements(client: pg.ClientBase): void {
  const connection = (client as { connection?: Record<string, unknown> }).connection;
  if (connection === undefined) return;
  if ("parsedStatements" in connection) connection.parsedStatements = {};
  if ("submittedNamedStatements" in connection) connection.submittedNamedStatements = {};
}

/** `value` as an Error, for APIs that take one. */
export function asError(value: unknown): Error {
  return value instanceof Error ? value : new Error(String(value));
}
