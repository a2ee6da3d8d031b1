/**
 * AC2: a crash between the work and the commit leaves neither effect nor fence. A real child
 * process receives the message from the SQS emulator and is killed with SIGKILL inside the fence
 * transaction; the parent then checks the database and lets the redelivered message through.
 */
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import { pollOnce } from "../../local/event-source.ts";
import { lambdaContext } from "../../local/lambda-context.ts";
import {
  award,
  type ConsumerTestBed,
  consumerTestBed,
  effectsOf,
  send,
} from "../support/consumer-harness.ts";

const CHILD = fileURLToPath(new URL("../support/crash-child.ts", import.meta.url));

let bed: ConsumerTestBed;
beforeAll(async () => {
  bed = await consumerTestBed();
});
afterAll(async () => {
  await bed?.close();
});

/** Runs the child until it dies; returns its exit signal and what it printed. */
function runChild(
  env: Record<string, string>,
): Promise<{ signal: NodeJS.Signals | null; code: number | null; out: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CHILD], {
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString();
    });
    child.stderr.on("data", (d: Buffer) => {
      out += d.toString();
    });
    child.on("error", reject);
    child.on("exit", (code, signal) => resolve({ code, signal, out }));
  });
}

describe.each([
  ["after-fence", "per-record"],
  ["after-work", "per-record"],
  ["after-fence", "batch"],
  ["after-work", "batch"],
] as const)("AC2 a process killed (SIGKILL) %s, before COMMIT, in %s mode", (point, mode) => {
  it("leaves neither effect nor fence, and the redelivered message applies exactly once", async () => {
    const jobId = `ac2-${point}-${mode}`;
    const queue = await bed.queue(`ac2-${point}-${mode}`, { VisibilityTimeout: "1" });
    await send(bed.sqs, queue.url, award(jobId, 11, `u-${jobId}`));

    const crashed = await runChild({
      CRASH_POINT: point,
      COMMIT_MODE: mode,
      DATABASE_URL: bed.db.url,
      SQS_ENDPOINT: bed.emulator.endpoint,
      EVENTBRIDGE_ENDPOINT: bed.sink.endpoint,
      QUEUE_URL: queue.url,
      QUEUE_ARN: queue.arn,
    });
    expect(crashed.out).toContain(`crashing ${point} ${jobId}`);
    expect(crashed.signal).toBe("SIGKILL");

    // Nothing committed: no ledger entry, no fence, no dead letter.
    expect(await effectsOf(bed.db, jobId)).toEqual({ ledger: 0, fences: 0, deadLetters: 0 });

    // The message was never deleted; once its visibility lapses it comes back as attempt 2.
    const handler = bed.consumer({ ...awardPointsConsumer, commitMode: mode }, { queueUrl: queue.url });
    const source = { sqs: bed.sqs, queueUrl: queue.url, queueArn: queue.arn, waitSeconds: 5 };
    const redelivery = await pollOnce(source, handler, lambdaContext("award-points"));
    expect(redelivery.received.map((r) => r.attributes.ApproximateReceiveCount)).toEqual(["2"]);
    expect(redelivery.failedIds).toEqual([]);
    expect(await effectsOf(bed.db, jobId)).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });

    // And a further duplicate delivery of the same job changes nothing.
    await send(bed.sqs, queue.url, award(jobId, 11, `u-${jobId}`));
    expect((await pollOnce(source, handler, lambdaContext("award-points"))).failedIds).toEqual([]);
    expect(await effectsOf(bed.db, jobId)).toEqual({ ledger: 1, fences: 1, deadLetters: 0 });
  });
});
