/**
 * `npm run send -- <consumer> <payload-json> [options]`: sends jobs to a consumer of the running
 * local stack, built and checked as a producer would (jobEnvelope, sendJobs), and says what was
 * sent. `--raw`/`--raw-file` send a body as it is instead, to try the poison path. Everything the
 * command decides is here; scripts/send.ts only wires it to the process.
 *
 * Exit codes: 0 every job sent; 1 SQS failed some (each is printed); 2 nothing sent, because the
 * command line, the payload or the stack is not usable.
 */
import { randomUUID } from "node:crypto";
import { readFile } from "node:fs/promises";
import { parseArgs } from "node:util";
import { GetQueueAttributesCommand, SendMessageCommand, type SQSClient } from "@aws-sdk/client-sqs";
import type { z } from "zod";
import { CONSUMERS } from "../functions/consumers.ts";
import { parseJson } from "../shared/envelope/parse-json.ts";
import { InvalidJobError, JobIdDerivationError, SendRefusedError } from "../shared/errors/sending.ts";
import { type JobEnvelope, jobEnvelope } from "../shared/producer/job-envelope.ts";
import { deriveJobId } from "../shared/producer/job-id.ts";
import { type SendJobsOptions, sendJobs } from "../shared/producer/send-jobs.ts";
import { localSqsClient } from "./aws-clients.ts";
import { stackFilePath } from "./local-dir.ts";
import type { StackInfo } from "./stack.ts";

export const SEND_USAGE = `usage: npm run send -- <consumer> <payload-json> [options]
       npm run send -- <consumer> --raw <text> | --raw-file <path>

  --job-id <id>          the job's id (default: derived from --key, printed)
  --key <key>            derive the job ids from this key (default: a random one, printed)
  --tenant <id>          the tenant (default: t_local)
  --correlation-id <id>  the correlation id (default: none; the job id stands in)
  --count <n>            send n jobs with this payload, ids derived from the key and 1…n (default 1)
  --raw <text>           send <text> as the message body, unchanged and unchecked (try the poison path)
  --raw-file <path>      the same, with the body read from a file (UTF-8 text: SQS bodies are text)`;

/** The default tenant of jobs sent from the command line. */
export const SEND_DEFAULT_TENANT = "t_local";
/** The most jobs one command sends. */
export const SEND_MAX_COUNT = 10_000;

/** What the command line asks for. */
export interface SendRequest {
  readonly consumer: string;
  readonly payloadJson: string;
  readonly jobId?: string;
  readonly key?: string;
  readonly tenantId: string;
  readonly correlationId?: string;
  readonly count: number;
}

/** A body to send as it is, not a job: `text` given on the command line, or the file at `file`. */
export interface RawSendRequest {
  readonly consumer: string;
  readonly raw: { readonly text: string } | { readonly file: string };
}

/** The options that build a job, which a raw body has none of. */
const JOB_OPTIONS = ["job-id", "key", "tenant", "correlation-id", "count"] as const;

/** Reads the command line; a string is the usage error to print. Pure. */
export function parseSendArgs(argv: readonly string[]): SendRequest | RawSendRequest | string {
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse(argv);
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  }
  const { values, positionals } = parsed;
  if (values.raw !== undefined || values["raw-file"] !== undefined) {
    if (values.raw !== undefined && values["raw-file"] !== undefined)
      return "give --raw or --raw-file, not both";
    if (positionals.length !== 1)
      return positionals.length < 1
        ? "a consumer is required"
        : "--raw and --raw-file send a body as it is: give the consumer only, no payload";
    const jobOption = JOB_OPTIONS.find((name) => values[name] !== undefined);
    if (jobOption) return `--${jobOption} builds a job; a raw body is sent as it is, with none`;
    return {
      consumer: positionals[0] as string,
      raw: values.raw !== undefined ? { text: values.raw } : { file: values["raw-file"] as string },
    };
  }
  if (positionals.length !== 2)
    return positionals.length < 2
      ? "a consumer and a payload are required"
      : `unexpected argument ${JSON.stringify(positionals[2])}`;
  const [consumer, payloadJson] = positionals as [string, string];
  let count = 1;
  if (values.count !== undefined) {
    count = /^\d+$/.test(values.count) ? Number(values.count) : Number.NaN;
    if (!(count >= 1 && count <= SEND_MAX_COUNT))
      return `--count must be a whole number in 1–${SEND_MAX_COUNT}`;
  }
  if (values["job-id"] !== undefined && count > 1)
    return "--job-id names one job; to send several, let their ids be derived (--key)";
  if (values["job-id"] !== undefined && values.key !== undefined)
    return "--job-id and --key are two ways to choose the id: give one";
  return {
    consumer,
    payloadJson,
    tenantId: values.tenant ?? SEND_DEFAULT_TENANT,
    count,
    ...(values["job-id"] !== undefined ? { jobId: values["job-id"] } : {}),
    ...(values.key !== undefined ? { key: values.key } : {}),
    ...(values["correlation-id"] !== undefined ? { correlationId: values["correlation-id"] } : {}),
  };
}

function parse(argv: readonly string[]) {
  return parseArgs({
    args: [...argv],
    allowPositionals: true,
    strict: true,
    options: {
      "job-id": { type: "string" },
      key: { type: "string" },
      tenant: { type: "string" },
      "correlation-id": { type: "string" },
      count: { type: "string" },
      raw: { type: "string" },
      "raw-file": { type: "string" },
    },
  });
}

/** The stack's description in `localDir`, or undefined when there is none (or it is unusable). */
export async function readStackInfo(localDir: string): Promise<StackInfo | undefined> {
  try {
    const info = JSON.parse(await readFile(stackFilePath(localDir), "utf8")) as StackInfo;
    if (typeof info?.sqsEndpoint !== "string" || typeof info.queues !== "object" || info.queues === null)
      return undefined;
    return info;
  } catch {
    return undefined;
  }
}

/** A consumer as the command needs it: its name and its payload schema. */
export interface SendableConsumer {
  readonly definition: { readonly name: string; readonly payload: z.ZodType };
}

/** What the command runs against. */
export interface SendContext {
  readonly out: (line: string) => void;
  readonly err: (line: string) => void;
  /** Where `stack.json` is. */
  readonly localDir: string;
  /** @default CONSUMERS of functions/consumers.ts */
  readonly consumers?: readonly SendableConsumer[];
  /** A new client per run (the command destroys it when done). @default a client for the stack's emulator */
  readonly sqs?: (endpoint: string) => SQSClient;
  /** The key when none is given. @default randomUUID */
  readonly randomKey?: () => string;
  /** Passed to sendJobs (tests shorten its waits). */
  readonly sendOptions?: SendJobsOptions;
}

/** Runs the command; resolves to its exit code. Never throws for what a user can get wrong. */
export async function runSend(argv: readonly string[], context: SendContext): Promise<number> {
  const { out, err } = context;
  const refuse = (message: string, usage = false) => {
    err(`send: ${message}`);
    if (usage) err(SEND_USAGE);
    return 2;
  };

  const request = parseSendArgs(argv);
  if (typeof request === "string") return refuse(request, true);

  const consumers = context.consumers ?? CONSUMERS;
  const consumer = consumers.find((c) => c.definition.name === request.consumer);
  if (!consumer) {
    return refuse(
      `no consumer ${JSON.stringify(request.consumer)}; the registry (functions/consumers.ts) has: ${consumers.map((c) => c.definition.name).join(", ")}`,
    );
  }
  if ("raw" in request) return sendRaw(request, context, refuse);

  let payload: unknown;
  try {
    payload = parseJson(request.payloadJson);
  } catch (error) {
    return refuse(`the payload is not JSON (${error instanceof Error ? error.message : String(error)})`);
  }

  // Every job is built and checked before anything is sent: one bad id sends none.
  const key = request.jobId === undefined ? (request.key ?? (context.randomKey ?? randomUUID)()) : undefined;
  const envelopes: JobEnvelope[] = [];
  try {
    for (let n = 1; n <= request.count; n++) {
      envelopes.push(
        jobEnvelope(consumer.definition.payload, {
          jobId: request.jobId ?? deriveJobId(request.consumer, key as string, n),
          tenantId: request.tenantId,
          payload,
          ...(request.correlationId !== undefined ? { correlationId: request.correlationId } : {}),
        }),
      );
    }
  } catch (error) {
    if (error instanceof InvalidJobError)
      return refuse(
        `${request.consumer} would refuse this job (${error.reason}):\n  ${error.issues.join("\n  ")}`,
      );
    if (error instanceof JobIdDerivationError) return refuse(error.message);
    throw error;
  }

  const target = await reachQueue(context, request.consumer);
  if (typeof target === "string") return refuse(target);
  const { sqs, queueUrl } = target;
  try {
    out(
      `sending ${envelopes.length} ${request.consumer} job${envelopes.length === 1 ? "" : "s"} to ${queueUrl} (tenant ${request.tenantId})`,
    );
    if (key !== undefined) {
      const again = `--key ${key}${request.count > 1 ? ` --count ${request.count}` : ""}`;
      out(
        `job id${envelopes.length === 1 ? "" : "s"} derived from key ${key}: pass ${again} to send the same job${envelopes.length === 1 ? "" : "s"} again`,
      );
    }

    let result: Awaited<ReturnType<typeof sendJobs>>;
    try {
      result = await sendJobs(
        sqs,
        queueUrl,
        envelopes.map((envelope) => ({ envelope })),
        context.sendOptions,
      );
    } catch (error) {
      if (error instanceof SendRefusedError) return refuse(error.message);
      throw error;
    }
    for (const sent of result.sent) out(`sent    ${sent.jobId}  message ${sent.messageId}`);
    for (const failed of result.failed) {
      err(
        `failed  ${failed.jobId}  ${failed.code}: ${failed.message} (${failed.senderFault ? "the job is at fault: fix it" : "send it again later, same job id"})`,
      );
    }
    out(`${result.sent.length} sent, ${result.failed.length} failed`);
    return result.failed.length > 0 ? 1 : 0;
  } finally {
    sqs.destroy();
  }
}

/**
 * The consumer's queue in the running stack, with a client for it (the caller destroys it), or
 * the refusal to print when there is no stack, no such queue, or the stack does not answer.
 */
async function reachQueue(
  context: SendContext,
  consumer: string,
): Promise<{ sqs: SQSClient; queueUrl: string } | string> {
  const stackFile = stackFilePath(context.localDir);
  const info = await readStackInfo(context.localDir);
  if (!info) return `no running local stack found (${stackFile}): start one with npm start`;
  const queueUrl = info.queues[consumer]?.url;
  if (!queueUrl) return `the local stack (${stackFile}) has no queue for ${consumer}`;
  const sqs = (context.sqs ?? localSqsClient)(info.sqsEndpoint);
  // stack.json outlives the stack: ask its queue before sending, so a stopped stack is a refusal.
  try {
    await sqs.send(new GetQueueAttributesCommand({ QueueUrl: queueUrl, AttributeNames: ["QueueArn"] }));
  } catch (error) {
    sqs.destroy();
    return `the local stack of ${stackFile} does not answer at ${info.sqsEndpoint} (${error instanceof Error ? error.name : "error"}): start it with npm start`;
  }
  return { sqs, queueUrl };
}

/**
 * Sends a body exactly as given, as a producer with a bug or a foreign system would: nothing is
 * built or checked, so a body the consumer cannot read takes the poison path (one attempt, a dead
 * letter under the message id when no job id can be read). SQS carries text only, so a file must
 * be UTF-8; what SQS itself refuses (an empty body, characters it does not allow) is printed.
 */
async function sendRaw(
  request: RawSendRequest,
  context: SendContext,
  refuse: (message: string) => number,
): Promise<number> {
  const { out, err } = context;
  let body: string;
  if ("text" in request.raw) {
    body = request.raw.text;
  } else {
    let bytes: Buffer;
    try {
      bytes = await readFile(request.raw.file);
    } catch (error) {
      return refuse(
        `cannot read ${request.raw.file} (${(error as NodeJS.ErrnoException).code ?? String(error)})`,
      );
    }
    try {
      body = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes);
    } catch {
      return refuse(`${request.raw.file} is not UTF-8 text, and an SQS message body can only be text`);
    }
  }
  if (body.length === 0) return refuse("the body is empty, and SQS takes no empty message body");

  const target = await reachQueue(context, request.consumer);
  if (typeof target === "string") return refuse(target);
  const { sqs, queueUrl } = target;
  try {
    const bytes = Buffer.byteLength(body, "utf8");
    out(`sending a raw body of ${bytes} byte${bytes === 1 ? "" : "s"} to ${queueUrl}, unchecked`);
    try {
      const sent = await sqs.send(
        new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: body, ...fifoFields(queueUrl) }),
      );
      out(`sent    message ${sent.MessageId}`);
      out(
        `a body ${request.consumer} cannot read is dead-lettered as poison after one attempt; without a job id in it, under the message id ${sent.MessageId}`,
      );
      return 0;
    } catch (error) {
      const e = error as { name?: string; message?: string };
      err(`failed  ${e.name ?? "Error"}: ${e.message ?? String(error)}`);
      return 1;
    }
  } finally {
    sqs.destroy();
  }
}

/** A FIFO queue needs a group and a deduplication id on every message; a raw body gets fresh ones. */
function fifoFields(queueUrl: string): { MessageGroupId?: string; MessageDeduplicationId?: string } {
  if (!queueUrl.endsWith(".fifo")) return {};
  return { MessageGroupId: RAW_FIFO_GROUP, MessageDeduplicationId: randomUUID() };
}

/** The message group of raw bodies sent to a FIFO consumer. */
export const RAW_FIFO_GROUP = "raw";
