/**
 * A consumer process that kills itself with SIGKILL inside the fence transaction, at the point
 * named by CRASH_POINT: `after-fence` (the fence is inserted, the work has not run) or
 * `after-work` (the work ran, COMMIT has not), in the COMMIT_MODE given. Run by the AC2 test as a
 * real child process.
 */
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import { localEventBridgeClient, localSqsClient } from "../../local/aws-clients.ts";
import { pollOnce } from "../../local/event-source.ts";
import { lambdaContext } from "../../local/lambda-context.ts";
import { type CommitMode, createConsumer } from "../../shared/consumer.ts";

const env = process.env as Record<string, string>;
const point = env.CRASH_POINT;
const sqs = localSqsClient(env.SQS_ENDPOINT as string);

const handler = createConsumer(
  {
    ...awardPointsConsumer,
    commitMode: (env.COMMIT_MODE ?? "per-record") as CommitMode,
    work: async (job, tx) => {
      if (point === "after-work") await awardPointsConsumer.work(job, tx);
      // Tell the parent where we are, then die without any chance to commit or roll back.
      process.stdout.write(`crashing ${point} ${job.jobId}\n`, () => process.kill(process.pid, "SIGKILL"));
      await new Promise(() => {});
    },
  },
  {
    config: { databaseUrl: env.DATABASE_URL as string, opsBusName: "ops", queueUrl: env.QUEUE_URL as string },
    sqs,
    eventBridge: localEventBridgeClient(env.EVENTBRIDGE_ENDPOINT as string),
  },
);

await pollOnce(
  { sqs, queueUrl: env.QUEUE_URL as string, queueArn: env.QUEUE_ARN as string },
  handler,
  lambdaContext("award-points"),
);
process.stdout.write("finished without crashing\n");
process.exit(3);
