/**
 * Function logins on deploy: read each login's secret from Secrets Manager and create or update
 * the PostgreSQL user to match, in one transaction, so a deployment either has every login in
 * step with its secret or changes none.
 */
import { GetSecretValueCommand, type SecretsManagerClient } from "@aws-sdk/client-secrets-manager";
import type pg from "pg";
import { z } from "zod";
import { type FunctionLogin, groupRoleOf, provisionLogin } from "../../shared/db/queries/provision-login.ts";
import { withTransaction } from "../../shared/db/transaction.ts";
import { LoginSecretError } from "../../shared/errors/database.ts";
import type { LoginSecret } from "./config.ts";

/** The fields of an RDS-style database secret this function uses. */
const secretValue = z.object({ username: z.string().min(1), password: z.string().min(1) });

/** Reads one login's user name and password. */
export async function readLoginSecret(
  client: SecretsManagerClient,
  spec: LoginSecret,
): Promise<FunctionLogin> {
  const { SecretString } = await client.send(new GetSecretValueCommand({ SecretId: spec.secretArn }));
  if (SecretString === undefined) throw new LoginSecretError(`secret ${spec.secretArn} has no string value`);
  let json: unknown;
  try {
    json = JSON.parse(SecretString);
  } catch {
    throw new LoginSecretError(`secret ${spec.secretArn} is not JSON`);
  }
  const parsed = secretValue.safeParse(json);
  // The secret's content is never echoed: the message names only the fields that are wrong.
  if (!parsed.success) {
    const fields = [...new Set(parsed.error.issues.map((issue) => issue.path.join(".")))].join(", ");
    throw new LoginSecretError(
      `secret ${spec.secretArn} needs string fields username and password (bad: ${fields})`,
    );
  }
  const role = "consumer" in spec ? { consumer: spec.consumer } : { memberOf: spec.memberOf };
  return { ...role, username: parsed.data.username, password: parsed.data.password };
}

export interface ProvisionedLogin {
  readonly username: string;
  readonly memberOf: string;
  readonly outcome: "created" | "updated";
}

/** Creates or updates every login in one transaction. */
export async function provisionLogins(
  client: pg.ClientBase,
  logins: readonly FunctionLogin[],
): Promise<ProvisionedLogin[]> {
  const usernames = logins.map((login) => login.username);
  const repeated = usernames.filter((name, i) => usernames.indexOf(name) !== i);
  if (repeated.length > 0) {
    throw new LoginSecretError(
      `each kind of function needs its own login; ${repeated.join(", ")} appears twice`,
    );
  }
  if (logins.length === 0) return [];
  return withTransaction(client, async (tx) => {
    const done: ProvisionedLogin[] = [];
    for (const login of logins) {
      done.push({
        username: login.username,
        memberOf: groupRoleOf(login),
        outcome: await provisionLogin(tx, login),
      });
    }
    return done;
  });
}
