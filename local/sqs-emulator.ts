/** The fauxqs SQS emulator, in process, on a free port of 127.0.0.1. */
import { randomUUID } from "node:crypto";
import type { FauxqsServer } from "fauxqs";
import { ConfigurationError } from "../shared/errors/configuration.ts";
import { LOCAL_REGION } from "./aws-clients.ts";

/**
 * The emulator package, imported when an emulator starts: it is an optional peer dependency of the
 * published package (only the testing kit and the local stack use it), and it needs Node 22.5 or
 * later (`node:sqlite`), so importing `jobfence/testing` alone never loads it.
 */
async function importFauxqs(): Promise<typeof import("fauxqs")> {
  try {
    return await import("fauxqs");
  } catch (error) {
    throw new ConfigurationError("SQS emulator", [
      `the npm package fauxqs could not be loaded (${(error as Error).message}): the testing kit and the ` +
        "local stack need it as a dev dependency (npm install --save-dev fauxqs), on Node 22.5 or later",
    ]);
  }
}

/** A running emulator. */
export interface SqsEmulator {
  /** Endpoint for SDK clients. Always pass it: the emulator's queue URLs name a host that does not resolve. */
  readonly endpoint: string;
  /** The emulator itself, for inspection (in-flight messages and their visibility deadlines). */
  readonly server: FauxqsServer;
  stop(): Promise<void>;
}

/**
 * Starts the emulator on `port` (0: any free one). With `dataDir` its queues and messages are kept
 * in SQLite there, so a restarted stack finds the messages it had not yet processed.
 *
 * Its FIFO receives behave like SQS's (see {@link batchFifoReceives}); it throws at start-up if
 * the fauxqs internals that relies on are not there.
 */
export async function startSqsEmulator(
  options: { port?: number; dataDir?: string } = {},
): Promise<SqsEmulator> {
  const { startFauxqs } = await importFauxqs();
  const server = await startFauxqs({
    port: options.port ?? 0,
    host: "127.0.0.1",
    logger: false,
    defaultRegion: LOCAL_REGION,
    ...(options.dataDir ? { dataDir: options.dataDir } : {}),
  });
  try {
    batchFifoReceives(server);
  } catch (error) {
    await server.stop();
    throw error;
  }
  return { endpoint: `http://127.0.0.1:${server.port}`, server, stop: () => server.stop() };
}

// ---------------------------------------------------------------------------------------------
// FIFO receives as SQS does them.
//
// fauxqs 2.4.1's FIFO receive (SqsQueue.dequeueFifo in dist/sqs/sqsStore.js) hands out at most ONE
// message per message group per ReceiveMessage: after taking one it locks the group
// (`fifoLockedGroups`, a count of the group's messages in flight) and moves to the next group.
// Real SQS returns several messages of one group, in order, in one receive (up to
// MaxNumberOfMessages), and Lambda's event source hands them to one invocation. Locally that hid
// how a consumer handles a FIFO batch: every group arrived one message per invocation. It also
// puts messages back at the head of their group one by one (`unshift`) when their visibility
// lapses or is set to 0, so several of one group come back in reverse order.
//
// The wrapper below keeps fauxqs's own receive for every message it hands out (receive counts,
// first-receive timestamps, in-flight entries, persistence, the redrive to a dead-letter queue
// after maxReceiveCount) and only changes which messages one receive may take:
//
// - before taking, each ready group is put back in send order (by sequence number);
// - it calls the original repeatedly; after each call it hides, for the rest of this receive, the
//   lock entries of the groups that call took from, so the next call takes the next message of
//   those groups too; it stops when the count is reached or a call takes nothing;
// - afterwards it restores the hidden lock counts, summed, so the groups stay locked while any of
//   their messages is in flight.
//
// A group already locked when the receive starts (a message of it in flight from an earlier
// receive) is never unhidden: it gives nothing until that message is deleted or visible again,
// as in SQS. A receive with visibility timeout 0 goes to the original alone: its messages are
// visible again at once, so calling again would hand the same message out twice.
// ---------------------------------------------------------------------------------------------

/** What the wrapper relies on in a fauxqs FIFO queue (SqsQueue, dist/sqs/sqsStore.js). */
interface FauxqsQueue {
  attributes: Record<string, string>;
  fifoMessages: Map<string, Array<{ body?: string; sequenceNumber?: string }>>;
  fifoLockedGroups: Map<string, number>;
  inflightMessages: Map<string, unknown>;
  isFifo(): boolean;
  processTimers(): void;
  dequeue(maxCount: number, visibilityTimeoutOverride?: number, dlqResolver?: unknown): ReceivedMessage[];
}

interface ReceivedMessage {
  readonly ReceiptHandle: string;
  readonly Body: string;
}

type DequeueFifo = (
  this: FauxqsQueue,
  maxCount: number,
  visibilityTimeoutOverride?: number,
  dlqResolver?: unknown,
) => ReceivedMessage[];

interface FauxqsQueuePrototype {
  dequeueFifo?: DequeueFifo;
  [BATCHED]?: true;
}

/** Marks fauxqs's queue prototype once wrapped (it is shared by every emulator in the process). */
const BATCHED = Symbol.for("jobfence.fauxqs.fifo-batched-receive");
/** SQS's most messages per receive. */
const MAX_PER_RECEIVE = 10;

function internalsMissing(what: string): Error {
  return new Error(
    `the fauxqs SQS emulator no longer has ${what}: local/sqs-emulator.ts wraps its FIFO receive ` +
      "(SqsQueue.dequeueFifo and fifoLockedGroups in fauxqs 2.4.1) so that one receive returns several " +
      "messages of a group, as SQS does; after a fauxqs upgrade, adapt or remove that wrapper",
  );
}

/** Puts each ready group back in send order: fauxqs returns messages to the head of a group one by one. */
function restoreSendOrder(queue: FauxqsQueue): void {
  for (const messages of queue.fifoMessages.values()) {
    if (messages.length < 2 || messages.some((m) => typeof m.sequenceNumber !== "string")) continue;
    messages.sort((a, b) => ((a.sequenceNumber as string) < (b.sequenceNumber as string) ? -1 : 1));
  }
}

function batchedDequeueFifo(original: DequeueFifo): DequeueFifo {
  return function dequeueFifo(maxCount, visibilityTimeoutOverride, dlqResolver) {
    this.processTimers();
    restoreSendOrder(this);
    const visibility =
      visibilityTimeoutOverride ?? Number.parseInt(this.attributes.VisibilityTimeout ?? "", 10);
    if (!(visibility > 0)) return original.call(this, maxCount, visibilityTimeoutOverride, dlqResolver);

    const limit = Math.min(maxCount, MAX_PER_RECEIVE);
    const received: ReceivedMessage[] = [];
    /** Lock counts of the groups this receive took from, hidden from the original until it returns. */
    const hidden = new Map<string, number>();
    try {
      while (received.length < limit) {
        const lockedBefore = new Set(this.fifoLockedGroups.keys());
        const taken = original.call(this, limit - received.length, visibilityTimeoutOverride, dlqResolver);
        if (taken.length === 0) break;
        received.push(...taken);
        for (const [group, count] of this.fifoLockedGroups) {
          if (lockedBefore.has(group)) continue; // locked before this call: it took nothing from it
          hidden.set(group, (hidden.get(group) ?? 0) + count);
          this.fifoLockedGroups.delete(group);
        }
      }
    } finally {
      for (const [group, count] of hidden) {
        this.fifoLockedGroups.set(group, (this.fifoLockedGroups.get(group) ?? 0) + count);
      }
    }
    return received;
  };
}

/** Whether `value` has the shape of a fauxqs queue, as far as the wrapper needs it. */
function isFauxqsQueue(value: unknown): value is FauxqsQueue {
  if (typeof value !== "object" || value === null) return false;
  const q = value as Partial<Record<keyof FauxqsQueue, unknown>>;
  return (
    q.fifoLockedGroups instanceof Map &&
    q.fifoMessages instanceof Map &&
    q.inflightMessages instanceof Map &&
    typeof q.attributes === "object" &&
    typeof q.isFifo === "function" &&
    typeof q.processTimers === "function" &&
    typeof q.dequeue === "function"
  );
}

/**
 * Creates a queue through the server and returns fauxqs's own queue object for it. fauxqs does not
 * expose its store; its `createQueue` puts the new queue object in the store's maps, so for the
 * length of that synchronous call `Map.prototype.set` notes the queue it is given.
 */
function createAndCatchQueue(
  server: FauxqsServer,
  name: string,
  attributes: Record<string, string>,
): unknown {
  const set = Map.prototype.set;
  let caught: unknown;
  Map.prototype.set = function (this: Map<unknown, unknown>, key: unknown, value: unknown) {
    if (caught === undefined && typeof value === "object" && value !== null && "fifoLockedGroups" in value)
      caught = value;
    return set.call(this, key, value);
  };
  try {
    server.createQueue(name, { attributes });
  } finally {
    Map.prototype.set = set;
  }
  return caught;
}

/**
 * Makes the emulator's FIFO receives return several messages of a group (above), once per process,
 * and checks on a probe queue that they do. Throws a clear Error if fauxqs's internals are not
 * what the wrapper relies on.
 */
function batchFifoReceives(server: FauxqsServer): void {
  const probe = `jobfence-probe-${randomUUID()}.fifo`;
  try {
    const queue = createAndCatchQueue(server, probe, {
      FifoQueue: "true",
      ContentBasedDeduplication: "true",
    });
    if (queue === undefined) throw internalsMissing("a queue object in its store");
    if (!isFauxqsQueue(queue)) throw internalsMissing("the queue fields it relies on");
    const prototype = Object.getPrototypeOf(queue) as FauxqsQueuePrototype;
    const original = prototype.dequeueFifo;
    if (typeof original !== "function") throw internalsMissing("SqsQueue.dequeueFifo");
    if (!prototype[BATCHED]) {
      prototype.dequeueFifo = batchedDequeueFifo(original);
      prototype[BATCHED] = true;
    }

    // The check: fauxqs's own receive path (dequeue → dequeueFifo) now takes both of one group.
    server.sendMessage(probe, "1", { messageGroupId: "g" });
    server.sendMessage(probe, "2", { messageGroupId: "g" });
    const received = queue.dequeue(MAX_PER_RECEIVE, 30);
    const bodies = received.map((m) => m.Body).join(",");
    if (bodies !== "1,2" || queue.fifoLockedGroups.get("g") !== 2 || queue.inflightMessages.size !== 2)
      throw internalsMissing(
        `the FIFO receive the wrapper expects (a probe receive gave [${bodies}], ` +
          `group lock ${queue.fifoLockedGroups.get("g")}, ${queue.inflightMessages.size} in flight)`,
      );
  } finally {
    server.deleteQueue(probe);
  }
}
