/**
 * Function logins and the group roles they are granted (migrations 0003, 0006, 0014): one group
 * role per consumer (shared by the consumer's function and its backstop drain), one for the ops
 * functions and one for the TTL cleanup. `core.provision_login` creates or updates a login with
 * exactly one of them.
 */
import { createHash } from "node:crypto";
import { UnexpectedDatabaseAnswerError } from "../../errors/database.ts";
import type { Queryable } from "../queryable.ts";
import { scramSha256Verifier } from "../scram.ts";

/** The group roles shared by every deployment (migration 0003). */
export const SHARED_ROLES = ["jobfence_ops", "jobfence_cleanup"] as const;
export type SharedRole = (typeof SHARED_ROLES)[number];

/**
 * The role every consumer's group role is a member of: it holds the privileges on the core tables,
 * and row-level security narrows them to the rows of the consumer the session belongs to. No login
 * is granted it directly.
 */
export const CONSUMER_BASE_ROLE = "jobfence_consumer";

const ROLE_PREFIX = "jobfence_consumer_";

/** PostgreSQL truncates identifiers longer than this (NAMEDATALEN - 1). */
const MAX_IDENTIFIER = 63;
/** `_` and 12 hex digits of MD5. */
const DIGEST_SUFFIX = 13;

/**
 * A database identifier of one consumer: `prefix` and the consumer's name with `-` as `_`, when
 * that fits in 63 characters with room to spare for a digest; otherwise `prefix`, as much of the
 * name as leaves room, `_` and 12 hex digits of the name's MD5 (exactly 63). Consumer names are
 * lowercase letters, digits and `-`, so the short form is one-to-one, and the two forms differ in
 * length, so a short name never takes a long one's identifier.
 */
export function consumerIdentifier(prefix: string, consumer: string): string {
  const kept = MAX_IDENTIFIER - prefix.length - DIGEST_SUFFIX;
  const slug = consumer.replaceAll("-", "_");
  if (slug.length <= kept) return `${prefix}${slug}`;
  const digest = createHash("md5").update(consumer, "utf8").digest("hex").slice(0, 12);
  return `${prefix}${slug.slice(0, kept)}_${digest}`;
}

/**
 * The group role of `consumer` (`award-points` → `jobfence_consumer_award_points`; a name longer
 * than 32 characters is shortened with a digest, {@link consumerIdentifier}). The same rule is
 * `core.consumer_role_name` in SQL (migration 0014); a test holds them equal.
 */
export function consumerRoleName(consumer: string): string {
  return consumerIdentifier(ROLE_PREFIX, consumer);
}

/** A login of one consumer (its function and its drain), or of a shared kind of function. */
export type LoginRole = { readonly consumer: string } | { readonly memberOf: SharedRole };

/** The group role a login is granted. */
export function groupRoleOf(role: LoginRole): string {
  return "consumer" in role ? consumerRoleName(role.consumer) : role.memberOf;
}

export type FunctionLogin = LoginRole & {
  readonly username: string;
  readonly password: string;
};

/**
 * Ensures `login` exists with its password and exactly its group role, and no other membership.
 * Only a SCRAM verifier is sent, so the password appears in no server log. Returns whether the
 * user was created or updated.
 */
export async function provisionLogin(db: Queryable, login: FunctionLogin): Promise<"created" | "updated"> {
  const { rows } = await db.query<{ outcome: "created" | "updated" }>(
    "SELECT core.provision_login($1, $2, $3) AS outcome",
    [login.username, scramSha256Verifier(login.password), groupRoleOf(login)],
  );
  const outcome = rows[0]?.outcome;
  if (outcome !== "created" && outcome !== "updated")
    throw new UnexpectedDatabaseAnswerError("core.provision_login returned no outcome");
  return outcome;
}

/**
 * Ensures the group role of `consumer` exists, is a member of {@link CONSUMER_BASE_ROLE} and is
 * registered as that consumer's; returns its name. The migration runner calls it before applying a
 * consumer's own migration set, so the set's grants can name the role.
 */
export async function ensureConsumerRole(db: Queryable, consumer: string): Promise<string> {
  const { rows } = await db.query<{ role: string }>("SELECT core.ensure_consumer_role($1) AS role", [
    consumer,
  ]);
  const role = rows[0]?.role;
  if (role === undefined)
    throw new UnexpectedDatabaseAnswerError("core.ensure_consumer_role returned no role");
  return role;
}

/**
 * Registers the queues a replay may send `consumer`'s dead letters to (its source queue), replacing
 * what was registered. The deployment calls it after migrating: a dead letter's queue is written by
 * the consumer, so only a queue registered here is trusted (migration 0014).
 */
/**
 * Registers `consumer`'s fence TTL, as its harness writes it: the database decides from it when a
 * copy of the consumer's job is too old to trust without its fence (`outlived`, migration 0021).
 */
export async function registerFenceTtl(db: Queryable, consumer: string, ttlSeconds: number): Promise<void> {
  await db.query("SELECT core.register_fence_ttl($1, $2)", [consumer, ttlSeconds]);
}

export async function registerConsumerQueues(
  db: Queryable,
  consumer: string,
  queues: readonly string[],
): Promise<void> {
  await db.query("SELECT core.register_consumer_queues($1, $2::text[])", [consumer, queues]);
}
