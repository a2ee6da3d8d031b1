/**
 * The follow-up targets the deployment declares for each sending consumer (migration 0019): the
 * outbox's row policy lets a consumer write a follow-up only to one of them, and a replay of an
 * undelivered follow-up needs its pair too. The deployment registers them after migrating, from
 * the consumer registry (each definition's `sends`), as it registers the replay queues.
 */
import type { Queryable } from "../queryable.ts";

/** Replaces the targets declared for `sender` with `targets` (none: it sends to nobody). */
export async function registerFollowUpTargets(
  db: Queryable,
  sender: string,
  targets: readonly string[],
): Promise<void> {
  await db.query("SELECT core.register_follow_up_targets($1, $2::text[])", [sender, [...targets]]);
}

/** Registers every sender's declared targets, as `declared` maps them; returns the senders, sorted. */
export async function registerDeclaredFollowUpTargets(
  db: Queryable,
  declared: Readonly<Record<string, readonly string[]>>,
): Promise<string[]> {
  const senders = Object.keys(declared).sort();
  for (const sender of senders) await registerFollowUpTargets(db, sender, declared[sender] ?? []);
  return senders;
}
