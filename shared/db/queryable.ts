/** The one method of a pg client or pool that queries need; lets them run on either. */
import type pg from "pg";

/** Something that runs a parameterised query: a pool, a client, or a client inside a transaction. */
export type Queryable = Pick<pg.ClientBase, "query">;
