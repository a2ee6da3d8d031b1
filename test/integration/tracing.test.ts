/**
 * Traces end to end (docs/design.md §11): with an OpenTelemetry SDK registered (here an in-memory
 * exporter), one award followed from its producer through its `process` span, its follow-up and
 * notify-user's `process` span is one trace; a dead letter keeps the context of the span that
 * wrote it and a replay continues that trace; an X-Ray header starts it when no `traceparent` was
 * set; and without an SDK the producer's context still reaches the follow-up unchanged.
 */
import { type SpanContext, SpanKind, trace } from "@opentelemetry/api";
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from "@opentelemetry/sdk-trace-base";
import type { SQSRecord } from "aws-lambda";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { awardPointsConsumer } from "../../functions/award-points/consumer.ts";
import { notifyUserConsumer } from "../../functions/notify-user/consumer.ts";
import { createPool } from "../../shared/db/pool.ts";
import { replayDeadLetter } from "../../shared/dead-letters/replay.ts";
import { PermanentJobError } from "../../shared/errors/job.ts";
import { formatTraceparent, parseTraceparent } from "../../shared/tracing/trace-context.ts";
import {
  award,
  type ConsumerTestBed,
  consumerTestBed,
  invoke,
  sqsRecord,
} from "../support/consumer-harness.ts";

let bed: ConsumerTestBed;
const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });

beforeAll(async () => {
  bed = await consumerTestBed();
  trace.setGlobalTracerProvider(provider);
});
afterAll(async () => {
  trace.disable();
  await provider.shutdown();
  await bed?.close();
});
beforeEach(() => exporter.reset());

/** A record carrying `traceparent` as the producer's message attribute. */
function traced(
  body: unknown,
  traceparent: string,
  options: Parameters<typeof sqsRecord>[1] = {},
): SQSRecord {
  const record = sqsRecord(JSON.stringify(body), options);
  return {
    ...record,
    messageAttributes: {
      traceparent: { dataType: "String", stringValue: traceparent },
    } as SQSRecord["messageAttributes"],
  };
}

/** A producer's span and the traceparent it would send. */
function producer(name: string): { context: SpanContext; traceparent: string } {
  const span = trace.getTracer("test-producer").startSpan(`send ${name}`, { kind: SpanKind.PRODUCER });
  span.end();
  const context = span.spanContext();
  return { context, traceparent: formatTraceparent(context) };
}

const processSpans = (queue: string): ReadableSpan[] =>
  exporter.getFinishedSpans().filter((s) => s.name === `process ${queue}`);

describe("one trace across the chain", () => {
  it("producer → process award-points → its follow-up → process notify-user share one trace, each a child of the one before", async () => {
    const sent = producer("award-points");
    const before = (await bed.followUps("notify-user")).length;
    expect(
      await invoke(bed.consumer(awardPointsConsumer), [traced(award("tr-1", 5), sent.traceparent)]),
    ).toEqual([]);
    const [awardSpan] = processSpans("award-points");
    expect(awardSpan).toBeDefined();
    const awardContext = (awardSpan as ReadableSpan).spanContext();
    expect(awardSpan).toMatchObject({
      kind: SpanKind.CONSUMER,
      attributes: {
        "messaging.system": "aws_sqs",
        "messaging.operation.type": "process",
        "messaging.destination.name": "award-points",
        "jobfence.consumer": "award-points",
        "jobfence.job_id": "tr-1",
        "jobfence.outcome": "applied",
        "messaging.message.conversation_id": "corr-tr-1",
      },
    });
    expect(awardContext.traceId).toBe(sent.context.traceId);
    expect(awardSpan?.parentSpanContext?.spanId).toBe(sent.context.spanId);
    expect(awardSpan?.links.map((l) => l.context.spanId)).toContain(sent.context.spanId);

    // The follow-up carries the context of the span that sent it.
    const [followUp] = (await bed.followUps("notify-user")).slice(before);
    expect(parseTraceparent(followUp?.attributes.traceparent)).toMatchObject({
      traceId: sent.context.traceId,
      spanId: awardContext.spanId,
    });

    expect(
      await invoke(bed.consumer(notifyUserConsumer), [
        traced(followUp?.envelope, followUp?.attributes.traceparent as string, {
          queueArn: "arn:aws:sqs:eu-west-1:000000000000:notify-user",
        }),
      ]),
    ).toEqual([]);
    const [notifySpan] = processSpans("notify-user");
    expect(notifySpan?.spanContext().traceId).toBe(sent.context.traceId);
    expect(notifySpan?.parentSpanContext?.spanId).toBe(awardContext.spanId);
    expect(notifySpan?.attributes["jobfence.outcome"]).toBe("applied");
  });

  it("a retry, a dead letter and its replay stay in the trace: the replay's send span is a child of the span that dead-lettered it", async () => {
    const sent = producer("award-points");
    let failures = 0;
    // Its dead letter names this queue, where the replay then sends it.
    const queue = await bed.queue("tr-replay");
    const flaky = bed.consumer(
      {
        ...awardPointsConsumer,
        work: async () => {
          failures++;
          if (failures === 1) throw new Error("the ledger blinked");
          throw new PermanentJobError("account closed");
        },
      },
      { queueUrl: queue.url },
    );
    const first = traced(award("tr-dl", 2), sent.traceparent, { messageId: "tr-dl-m" });
    expect(await invoke(flaky, [first])).toEqual(["tr-dl-m"]);
    expect(
      await invoke(flaky, [{ ...first, attributes: { ...first.attributes, ApproximateReceiveCount: "2" } }]),
    ).toEqual([]);
    const [retried, deadLettered] = processSpans("award-points");
    for (const span of [retried, deadLettered]) {
      expect(span?.spanContext().traceId).toBe(sent.context.traceId);
      expect(span?.parentSpanContext?.spanId).toBe(sent.context.spanId);
    }
    expect(retried?.attributes["jobfence.outcome"]).toBe("retry");
    expect(retried?.events.map((e) => e.name)).toContain("retry scheduled");
    expect(deadLettered).toMatchObject({
      attributes: { "jobfence.outcome": "dead-lettered", "jobfence.error_kind": "hard" },
      status: { code: 2 },
    });

    const [row] = await bed.db.withClient(
      async (c) =>
        (
          await c.query<{ id: string; message_attributes: Record<string, unknown> }>(
            "SELECT id, message_attributes FROM core.dead_letters WHERE job_id = 'tr-dl'",
          )
        ).rows,
    );
    expect(row?.message_attributes.trace_context).toBe(
      formatTraceparent((deadLettered as ReadableSpan).spanContext()),
    );

    const ops = createPool({ connectionString: bed.db.url, role: "jobfence_ops", max: 1 });
    try {
      await replayDeadLetter({ pool: ops, sqs: bed.sqs }, row?.id as string, "ops@example.com");
    } finally {
      await ops.end();
    }
    const sendSpan = exporter.getFinishedSpans().find((s) => s.name === "send tr-replay");
    expect(sendSpan).toMatchObject({
      kind: SpanKind.PRODUCER,
      attributes: { "jobfence.replay_of": row?.id },
    });
    expect(sendSpan?.spanContext().traceId).toBe(sent.context.traceId);
    expect(sendSpan?.parentSpanContext?.spanId).toBe(deadLettered?.spanContext().spanId);
    const { ReceiveMessageCommand } = await import("@aws-sdk/client-sqs");
    const { Messages = [] } = await bed.sqs.send(
      new ReceiveMessageCommand({ QueueUrl: queue.url, MessageAttributeNames: ["All"], WaitTimeSeconds: 1 }),
    );
    expect(Messages[0]?.MessageAttributes?.traceparent?.StringValue).toBe(
      formatTraceparent((sendSpan as ReadableSpan).spanContext()),
    );
  });

  it("an AWSTraceHeader starts the trace when the message has no traceparent", async () => {
    const record = sqsRecord(JSON.stringify(award("tr-xray", 1)));
    const header = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
    await invoke(bed.consumer(awardPointsConsumer), [
      { ...record, attributes: { ...record.attributes, AWSTraceHeader: header } },
    ]);
    const [span] = processSpans("award-points");
    expect(span?.spanContext().traceId).toBe("5759e988bd862e3fe1be46a994272793");
    expect(span?.parentSpanContext?.spanId).toBe("53995c3f42cd8ad8");
  });
});

describe("without an SDK", () => {
  it("the producer's context reaches the follow-up unchanged, and a dead letter keeps it", async () => {
    trace.disable();
    try {
      const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
      const before = (await bed.followUps("notify-user")).length;
      await invoke(bed.consumer(awardPointsConsumer), [traced(award("tr-noop", 3), traceparent)]);
      const [followUp] = (await bed.followUps("notify-user")).slice(before);
      expect(followUp?.attributes.traceparent).toBe(traceparent);
      await invoke(bed.consumer(awardPointsConsumer), [traced({ job_id: "tr-noop-poison" }, traceparent)]);
      const [row] = await bed.db.withClient(
        async (c) =>
          (
            await c.query<{ message_attributes: Record<string, unknown> }>(
              "SELECT message_attributes FROM core.dead_letters WHERE job_id = 'tr-noop-poison'",
            )
          ).rows,
      );
      expect(row?.message_attributes.trace_context).toBe(traceparent);
      expect(exporter.getFinishedSpans()).toEqual([]);
    } finally {
      trace.setGlobalTracerProvider(provider);
    }
  });
});
