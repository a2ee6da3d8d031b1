/**
 * A consumer's queues against its validated configuration: the source queue's retention,
 * visibility timeout and redrive (to its backstop, after the validated maxReceiveCount), and the
 * backstop's retention. The expectation is computed from the consumer's deployment
 * (`expectedQueues` in functions/consumers.ts), never kept by hand. Pure.
 */
import { CHECK, type Finding } from "./findings.ts";

/** What one consumer's queues should be. */
export interface ExpectedConsumerQueues {
  readonly consumer: string;
  readonly source: {
    readonly name: string;
    readonly retentionSeconds: number;
    readonly visibilityTimeoutSeconds: number;
    /** Receives before SQS moves a message to the backstop. */
    readonly maxReceiveCount: number;
  };
  readonly backstop: { readonly name: string; readonly retentionSeconds: number };
}

/** A queue as SQS describes it. */
export type ObservedQueue =
  | { readonly name: string; readonly exists: false }
  | {
      readonly name: string;
      readonly exists: true;
      readonly url: string;
      readonly arn: string;
      readonly retentionSeconds: number;
      readonly visibilityTimeoutSeconds: number;
      /** The RedrivePolicy; undefined when it has none. */
      readonly redrive: { readonly targetArn: string; readonly maxReceiveCount: number } | undefined;
    };

/** One consumer's queues as SQS describes them. */
export interface ObservedConsumerQueues {
  readonly consumer: string;
  readonly source: ObservedQueue;
  readonly backstop: ObservedQueue;
}

const SET_ATTRIBUTES = "aws sqs set-queue-attributes --queue-url";

function missing(consumer: string, queue: ObservedQueue, role: "source queue" | "backstop"): Finding {
  return {
    check: CHECK.queueMissing,
    where: `queue ${queue.name}`,
    what: `consumer ${consumer}'s ${role} does not exist`,
    todo: "deploy the stack (the JobConsumer construct creates both queues), or start the local stack (npm start)",
  };
}

/** Every difference between the `expected` queues and the `observed` ones. */
export function checkQueues(
  expected: readonly ExpectedConsumerQueues[],
  observed: readonly ObservedConsumerQueues[],
): Finding[] {
  const findings: Finding[] = [];
  for (const want of expected) {
    const have = observed.find((o) => o.consumer === want.consumer);
    if (!have) throw new Error(`no queues observed for consumer ${want.consumer}`);
    const { source, backstop } = have;
    if (!backstop.exists) findings.push(missing(want.consumer, backstop, "backstop"));
    else if (backstop.retentionSeconds !== want.backstop.retentionSeconds) {
      findings.push({
        check: CHECK.queueRetention,
        where: `queue ${backstop.name}`,
        what:
          `the backstop keeps messages ${backstop.retentionSeconds} s; it keeps them ${want.backstop.retentionSeconds} s ` +
          "(14 days), the time the drain has to record what the consumer could not",
        todo: `${SET_ATTRIBUTES} ${backstop.url} --attributes MessageRetentionPeriod=${want.backstop.retentionSeconds}`,
      });
    }
    if (!source.exists) {
      findings.push(missing(want.consumer, source, "source queue"));
      continue;
    }
    const where = `queue ${source.name}`;
    const configured = `consumer ${want.consumer}'s validated configuration (functions/consumers.ts)`;
    if (source.retentionSeconds !== want.source.retentionSeconds) {
      findings.push({
        check: CHECK.queueRetention,
        where,
        what:
          `MessageRetentionPeriod is ${source.retentionSeconds} s; ${configured} has ${want.source.retentionSeconds} s, ` +
          "which the fence TTL and the retry window were validated against",
        todo: `${SET_ATTRIBUTES} ${source.url} --attributes MessageRetentionPeriod=${want.source.retentionSeconds}`,
      });
    }
    if (source.visibilityTimeoutSeconds !== want.source.visibilityTimeoutSeconds) {
      findings.push({
        check: CHECK.queueVisibility,
        where,
        what:
          `VisibilityTimeout is ${source.visibilityTimeoutSeconds} s; ${configured} has ${want.source.visibilityTimeoutSeconds} s ` +
          "(6 × the function timeout + the batching window: shorter and a message still being processed is delivered again)",
        todo: `${SET_ATTRIBUTES} ${source.url} --attributes VisibilityTimeout=${want.source.visibilityTimeoutSeconds}`,
      });
    }
    const redrive = `RedrivePolicy='{"deadLetterTargetArn":"${backstop.exists ? backstop.arn : `<${backstop.name} ARN>`}","maxReceiveCount":${want.source.maxReceiveCount}}'`;
    const problems: string[] = [];
    if (source.redrive === undefined) {
      problems.push(
        "has no redrive policy: a message the harness cannot record circles until retention deletes it",
      );
    } else {
      if (backstop.exists && source.redrive.targetArn !== backstop.arn) {
        problems.push(`redrives to ${source.redrive.targetArn}, not to its backstop ${backstop.arn}`);
      }
      if (source.redrive.maxReceiveCount !== want.source.maxReceiveCount) {
        problems.push(
          `redrives after ${source.redrive.maxReceiveCount} receives; ${configured} has ${want.source.maxReceiveCount} ` +
            "(fewer sends retriable messages to the backstop; more delays the backstop while the database is unreachable)",
        );
      }
    }
    for (const problem of problems) {
      findings.push({
        check: CHECK.queueRedrive,
        where,
        what: problem,
        todo: `${SET_ATTRIBUTES} ${source.url} --attributes ${redrive}`,
      });
    }
  }
  return findings;
}

/**
 * Each consumer's source queue against the queues registered for replaying its dead letters
 * (core.consumer_roles.queues, written by the migrate function and the local stack). A dead
 * letter's queue is the consumer's word; with nothing registered a replay would send wherever a
 * row says.
 */
export function checkReplayQueues(
  registry: readonly { readonly consumer: string; readonly queues: readonly string[] }[],
  observed: readonly ObservedConsumerQueues[],
): Finding[] {
  const findings: Finding[] = [];
  for (const { consumer, source } of observed) {
    if (!source.exists) continue;
    const registered = registry.find((r) => r.consumer === consumer)?.queues ?? [];
    // By account and name (the URL's path): SQS answers GetQueueUrl with a host of its choosing
    // (a regional name, or an emulator's), not necessarily the one the deployment configured.
    if (registered.some((url) => queuePath(url) === queuePath(source.url))) continue;
    findings.push({
      check: CHECK.replayQueues,
      where: `consumer ${consumer}`,
      what:
        registered.length === 0
          ? "has no queue registered for replaying its dead letters, so a replay sends wherever a dead letter says"
          : `has ${registered.join(", ")} registered for replays, not its source queue ${source.url}`,
      todo: "run the migrate function (a deploy does; it registers JOBFENCE_CONSUMER_QUEUES), or restart the local stack",
    });
  }
  return findings;
}

/**
 * A queue URL's path, `/<account>/<name>`. Read by pattern, not `URL`: an emulator's regional host
 * (`sqs.eu-west-1.127.0.0.1`) is no host WHATWG URLs accept.
 */
function queuePath(url: string): string {
  return /^[a-z][a-z0-9+.-]*:\/\/[^/]*(\/.*)$/i.exec(url)?.[1] ?? url;
}
