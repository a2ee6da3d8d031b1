/**
 * Escalation (docs/design.md §8.2): once a day, if any dead letter has waited for
 * review longer than N days, one summary alert names the count per consumer and the oldest.
 * One event per run, never one per row: a backlog of thousands must not page thousands of times.
 *
 * Before counting, the daily run resolves as `superseded` every pending dead letter whose job
 * turned out applied ({@link resolveHealedDeadLetters}): no one is asked to review a failure that
 * healed.
 */
import type { EventBridgeClient } from "@aws-sdk/client-eventbridge";
import { publishOpsEvent } from "../alerts/ops-bus.ts";
import { type StalePending, stalePendingDeadLetters } from "../db/queries/stale-pending-dead-letters.ts";
import { supersedeAppliedDeadLetters } from "../db/queries/supersede-applied-dead-letters.ts";
import type { Queryable } from "../db/queryable.ts";

/** `detail-type` of the summary. */
export const DEAD_LETTERS_ESCALATED = "DeadLettersEscalated";

/** Escalate after 3 days pending. */
export const ESCALATION_DEFAULTS = Object.freeze({ thresholdDays: 3 });

/** `resolved_by` of the dead letters the run resolves as superseded. */
export const ESCALATION_ACTOR = "jobfence:escalation";

/** Consumers listed in one summary at most; EventBridge caps an event at 256 KiB. */
const MAX_LISTED_CONSUMERS = 100;

/** The summary's detail. */
export interface DeadLettersEscalatedDetail {
  readonly threshold_days: number;
  readonly total: number;
  /** The stalest consumers first, at most 100. */
  readonly consumers: StalePending[];
  /** Consumers with stale dead letters left out of the list. */
  readonly consumers_omitted: number;
  /** The oldest pending dead letter of all. */
  readonly oldest: { readonly consumer: string; readonly id: string; readonly created_at: string };
}

/** Options of {@link escalateStaleDeadLetters}. */
export interface EscalationOptions {
  readonly db: Queryable;
  readonly eventBridge: EventBridgeClient;
  readonly opsBusName: string;
  /** @default ESCALATION_DEFAULTS.thresholdDays */
  readonly thresholdDays?: number;
}

/**
 * Resolves as `superseded` (by {@link ESCALATION_ACTOR}) every pending dead letter whose job's
 * fence exists (poison too, when its job id was read from the envelope); returns how many. A replay
 * that crashed between its send and its commit leaves exactly that behind, and so does a
 * corrected resend of a job whose first message was poison.
 */
export function resolveHealedDeadLetters(db: Queryable): Promise<number> {
  return supersedeAppliedDeadLetters(db, ESCALATION_ACTOR);
}

/** Publishes the summary when something is stale; returns it, or undefined when all is fresh. */
export async function escalateStaleDeadLetters(
  options: EscalationOptions,
): Promise<DeadLettersEscalatedDetail | undefined> {
  const thresholdDays = options.thresholdDays ?? ESCALATION_DEFAULTS.thresholdDays;
  const stale = await stalePendingDeadLetters(options.db, thresholdDays * 86_400);
  const first = stale[0];
  if (!first) return undefined;
  const detail: DeadLettersEscalatedDetail = {
    threshold_days: thresholdDays,
    total: stale.reduce((sum, s) => sum + s.count, 0),
    consumers: stale.slice(0, MAX_LISTED_CONSUMERS),
    consumers_omitted: Math.max(0, stale.length - MAX_LISTED_CONSUMERS),
    oldest: { consumer: first.consumer, id: first.oldest_id, created_at: first.oldest_created_at },
  };
  await publishOpsEvent(options.eventBridge, options.opsBusName, DEAD_LETTERS_ESCALATED, detail);
  return detail;
}
