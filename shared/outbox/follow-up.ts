/**
 * Follow-ups: the messages a job's work sends to other consumers, as the outbox stores them. Pure.
 *
 * A follow-up is checked when the work sends it, against the schema its target parses it with
 * (the definition's `sends`), on the JSON the message will carry, so a follow-up its target would
 * dead-letter as poison fails its parent instead, where the bug is. Its job id is derived from the
 * parent's consumer and job id, the target and the key the author gives (by default the follow-up's
 * index among the job's sends to that target):
 *
 *   deriveJobId(target, parentConsumer, parentJobId, key)
 *
 * A job's work runs again only after its transaction rolled back, which took its follow-ups with
 * it, so the index is stable wherever it matters: every send of one committed row carries the same
 * id, and the target's fence absorbs a row sent twice.
 */

import type { z } from "zod";
import { CONSUMER_NAME } from "../config/fields.ts";
import type { StagedFollowUp } from "../db/queries/insert-follow-ups.ts";
import { canonicalJson } from "../envelope/canonical-json.ts";
import type { Job } from "../envelope/envelope.ts";
import { jobFingerprint } from "../envelope/fingerprint.ts";
import { parseJson } from "../envelope/parse-json.ts";
import { describeError } from "../errors/last-error.ts";
import { FollowUpRefusedError, InvalidJobError, JobIdDerivationError } from "../errors/sending.ts";
import { checkWire } from "../producer/job-envelope.ts";
import { deriveJobId, type JobIdKey } from "../producer/job-id.ts";
import { messageSize, SQS_SEND_LIMITS } from "../sqs/batches.ts";
import { sqsJson } from "../sqs/message-text.ts";

/**
 * A target as a sender names it: the target consumer's definition (its payload schema and, when it
 * narrows it, its fingerprint), or its payload schema alone.
 */
export type FollowUpTarget =
  | z.ZodType
  // biome-ignore lint/suspicious/noExplicitAny: the target's own payload type
  | { readonly payload: z.ZodType; readonly fingerprint?: (payload: any) => unknown };

/** What a consumer may send: each target consumer's name and what it parses follow-ups with. */
export type FollowUpSchemas = { readonly [target: string]: FollowUpTarget };

/** The payload a target takes, as its schema's input. */
export type FollowUpPayload<T> = T extends z.ZodType
  ? z.input<T>
  : T extends { readonly payload: infer S extends z.ZodType }
    ? z.input<S>
    : never;

/** One follow-up, as the work sends it. */
export interface FollowUp<P> {
  /** The target's payload, as its schema takes it (its input). */
  readonly payload: P;
  /**
   * What tells this follow-up apart from the job's other follow-ups to the same target: a name or
   * a number. @default its index among the job's sends to that target (0, 1, …)
   */
  readonly key?: JobIdKey;
  /** @default the parent job's tenant */
  readonly tenantId?: string;
  /** FIFO targets: the message group. @default the follow-up's tenant */
  readonly groupId?: string;
}

/** The longest key a follow-up may have, in bytes of its JSON (the outbox's CHECK, migration 0019). */
export const FOLLOW_UP_KEY_MAX_BYTES = 1024;

/** The `send` a job's work is given. Returns the follow-up's job id. */
export type SendFollowUp<F extends FollowUpSchemas> = <K extends keyof F & string>(
  target: K,
  followUp: FollowUp<FollowUpPayload<F[K]>>,
) => string;

/** What {@link followUpSender} needs of the sending consumer. */
export interface SenderSpec {
  readonly consumer: string;
  readonly sends: FollowUpSchemas;
}

/**
 * The `send` of one run of one job's work: each call checks the follow-up and hands it to
 * `stage` (the fence transaction, which writes it with the COMMIT). Throws FollowUpRefusedError,
 * and tells `refused` of it, so the job fails even when its work catches the error.
 */
export function followUpSender<F extends FollowUpSchemas>(
  spec: SenderSpec,
  parent: Job<unknown>,
  traceparent: string | null,
  stage: (followUp: StagedFollowUp) => void,
  refused: (error: FollowUpRefusedError) => void = () => {},
): SendFollowUp<F> {
  // Made at the first send: most runs of a job's work send nothing, or one follow-up.
  let indexOf: Map<string, number> | undefined;
  let ids: Set<string> | undefined;
  return ((target: string, followUp: FollowUp<unknown>) => {
    try {
      const index = indexOf?.get(target) ?? 0;
      const staged = stagedFollowUp(spec, parent, target, followUp, index, traceparent);
      if (ids?.has(staged.jobId)) {
        throw new FollowUpRefusedError(target, [
          `key ${JSON.stringify(followUp.key)} was already sent by this job: give each follow-up to one target its own key`,
        ]);
      }
      stage(staged);
      ids ??= new Set();
      ids.add(staged.jobId);
      indexOf ??= new Map();
      indexOf.set(target, index + 1);
      return staged.jobId;
    } catch (error) {
      // Told to the transaction too: a work that catches the refusal must not commit without it.
      if (error instanceof FollowUpRefusedError) refused(error);
      throw error;
    }
  }) as SendFollowUp<F>;
}

/** The `send` of a consumer that declares no follow-ups. */
export function refuseFollowUps(consumer: string): SendFollowUp<Record<never, never>> {
  return ((target: string) => {
    throw new FollowUpRefusedError(String(target), [
      `consumer ${JSON.stringify(consumer)} declares no follow-ups: name the target's payload schema in its definition's \`sends\``,
    ]);
  }) as SendFollowUp<Record<never, never>>;
}

/** One follow-up checked and made into its outbox row; throws FollowUpRefusedError. */
export function stagedFollowUp(
  spec: SenderSpec,
  parent: Job<unknown>,
  target: string,
  followUp: FollowUp<unknown>,
  index: number,
  traceparent: string | null,
): StagedFollowUp {
  const declared =
    typeof target === "string" && Object.hasOwn(spec.sends, target) ? spec.sends[target] : undefined;
  if (typeof target !== "string" || !CONSUMER_NAME.test(target) || declared === undefined) {
    const targets = Object.keys(spec.sends);
    throw new FollowUpRefusedError(String(target), [
      `not a target of ${JSON.stringify(spec.consumer)}: it sends to ${targets.length > 0 ? targets.join(", ") : "no consumer"} (its definition's \`sends\`)`,
    ]);
  }
  if (typeof followUp !== "object" || followUp === null || !("payload" in followUp)) {
    throw new FollowUpRefusedError(target, ["a follow-up is { payload, key?, tenantId?, groupId? }"]);
  }
  const key = followUp.key ?? index;
  let jobId: string;
  try {
    jobId = deriveJobId(target, spec.consumer, parent.jobId, key);
  } catch (error) {
    if (error instanceof JobIdDerivationError)
      throw new FollowUpRefusedError(target, [`key: ${error.message}`]);
    throw error;
  }
  // As the database stores it and hashes it again (core.follow_up_job_id); deriveJobId checked it.
  const keyJson = canonicalJson(key);
  if (Buffer.byteLength(keyJson, "utf8") > FOLLOW_UP_KEY_MAX_BYTES) {
    throw new FollowUpRefusedError(target, [
      `key: at most ${FOLLOW_UP_KEY_MAX_BYTES} bytes as JSON (a name or a number, not a document)`,
    ]);
  }
  const tenantId = followUp.tenantId ?? parent.tenantId;
  const groupId = followUp.groupId ?? null;
  if (groupId !== null && (typeof groupId !== "string" || groupId.length === 0 || groupId.length > 128)) {
    throw new FollowUpRefusedError(target, ["groupId must be 1–128 characters"]);
  }
  // Written once: the text checked, measured and fingerprinted is the text stored and sent (a
  // payload whose toJSON answers differently each time cannot slip a second form past the check).
  let body: string | undefined;
  try {
    body = sqsJson({
      job_id: jobId,
      tenant_id: tenantId,
      correlation_id: parent.correlationId,
      payload: followUp.payload,
    });
  } catch (error) {
    throw new FollowUpRefusedError(
      target,
      [`the follow-up cannot be written as JSON (${describeError(error).message})`],
      {
        cause: error,
      },
    );
  }
  if (body === undefined) throw new FollowUpRefusedError(target, ["the follow-up is not a JSON value"]);
  const wire = parseJson(body) as { payload: unknown };
  const { schema, narrow } = targetParts(declared);
  let parsedPayload: unknown;
  try {
    parsedPayload = checkWire(schema, wire);
  } catch (error) {
    if (error instanceof InvalidJobError)
      throw new FollowUpRefusedError(target, error.issues, { cause: error });
    throw error;
  }
  const size = messageSize({ MessageBody: body, ...traceAttributes(traceparent) });
  if (size > SQS_SEND_LIMITS.messageBytes) {
    throw new FollowUpRefusedError(target, [
      `the message is ${size} bytes as SQS counts them; at most ${SQS_SEND_LIMITS.messageBytes} can be sent`,
    ]);
  }
  let fingerprint: Buffer;
  try {
    // As the target will take it: the payload as sent, narrowed by the target's own fingerprint.
    fingerprint = jobFingerprint(tenantId, narrow ? narrow(parsedPayload) : wire.payload);
  } catch (error) {
    throw new FollowUpRefusedError(target, [`no fingerprint: ${describeError(error).message}`], {
      cause: error,
    });
  }
  return {
    consumer: spec.consumer,
    parentJobId: parent.jobId,
    target,
    jobId,
    key: keyJson,
    tenantId,
    correlationId: parent.correlationId,
    body,
    fingerprint,
    groupId,
    traceparent,
  };
}

/** The schema a target parses with, and its fingerprint's narrowing when it has one. */
export function targetParts(target: FollowUpTarget): {
  schema: z.ZodType;
  narrow?: (payload: unknown) => unknown;
} {
  if (typeof (target as { safeParse?: unknown }).safeParse === "function")
    return { schema: target as z.ZodType };
  const definition = target as Exclude<FollowUpTarget, z.ZodType>;
  return definition.fingerprint
    ? { schema: definition.payload, narrow: definition.fingerprint }
    : { schema: definition.payload };
}

/** The message attributes that carry a follow-up's trace context. */
export function traceAttributes(traceparent: string | null): {
  MessageAttributes?: Record<string, { DataType: "String"; StringValue: string }>;
} {
  return traceparent === null
    ? {}
    : { MessageAttributes: { traceparent: { DataType: "String", StringValue: traceparent } } };
}
