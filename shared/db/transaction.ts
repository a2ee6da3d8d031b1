/**
 * One transaction: BEGIN, the caller's statements, COMMIT; ROLLBACK on any error. The one helper
 * for every transaction that is not the fence's (replay and discard, migrations, login
 * provisioning). A pooled connection goes back after COMMIT or ROLLBACK, and is destroyed when even
 * the ROLLBACK failed: its state is then unknown.
 */
import type pg from "pg";

/** Runs `work` in a transaction on a connection taken from `pool`. */
export async function inTransaction<T>(pool: pg.Pool, work: (tx: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  let broken: Error | undefined;
  try {
    return await run(client, work, (error) => {
      broken = error;
    });
  } finally {
    client.release(broken);
  }
}

/**
 * Runs `work` in a transaction on `client`, which stays the caller's; `begin` may set its mode
 * (`BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY` for one consistent read).
 */
export function withTransaction<C extends pg.ClientBase, T>(
  client: C,
  work: (tx: C) => Promise<T>,
  begin = "BEGIN",
): Promise<T> {
  return run(
    client,
    work,
    () => {
      // The caller owns the connection; a failed ROLLBACK surfaces on its next query.
    },
    begin,
  );
}

async function run<C extends pg.ClientBase, T>(
  client: C,
  work: (tx: C) => Promise<T>,
  onRollbackFailed: (error: Error) => void,
  begin = "BEGIN",
): Promise<T> {
  await client.query(begin);
  try {
    const result = await work(client);
    await client.query("COMMIT");
    return result;
  } catch (error) {
    await client.query("ROLLBACK").catch((rollbackError: unknown) => {
      onRollbackFailed(rollbackError instanceof Error ? rollbackError : new Error(String(rollbackError)));
    });
    throw error;
  }
}
