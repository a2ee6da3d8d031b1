/** Creates or updates one function login through `core.provision_login` (migration 0006). */
import { UnexpectedDatabaseAnswerError } from "../../errors.ts";
import type { Queryable } from "../queryable.ts";
import { scramSha256Verifier } from "../scram.ts";

/** The group roles a function login can be granted (migration 0003). */
export const GROUP_ROLES = ["jobfence_consumer", "jobfence_ops", "jobfence_cleanup"] as const;
export type GroupRole = (typeof GROUP_ROLES)[number];

export interface FunctionLogin {
  readonly username: string;
  readonly password: string;
  readonly memberOf: GroupRole;
}

/**
 * Ensures `login` exists with its password and exactly its group role. Only a SCRAM verifier is
 * sent, so the password appears in no server log. Returns whether the user was created or updated.
 */
export async function provisionLogin(db: Queryable, login: FunctionLogin): Promise<"created" | "updated"> {
  const { rows } = await db.query<{ outcome: "created" | "updated" }>(
    "SELECT core.provision_login($1, $2, $3) AS outcome",
    [login.username, scramSha256Verifier(login.password), login.memberOf],
  );
  const outcome = rows[0]?.outcome;
  if (outcome !== "created" && outcome !== "updated")
    throw new UnexpectedDatabaseAnswerError("core.provision_login returned no outcome");
  return outcome;
}
