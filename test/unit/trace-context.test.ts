/** Reading and writing the trace context SQS carries (shared/tracing/trace-context.ts), and a replay's. */
import { describe, expect, it } from "vitest";
import { replayMessage } from "../../shared/dead-letters/replay-message.ts";
import { messageSize, SQS_SEND_LIMITS } from "../../shared/sqs/batches.ts";
import {
  creationContext,
  formatTraceparent,
  parseAwsTraceHeader,
  parseTraceparent,
} from "../../shared/tracing/trace-context.ts";

const TRACE = "0af7651916cd43dd8448eb211c80319c";
const SPAN = "b7ad6b7169203331";

describe("traceparent", () => {
  it("reads a valid one and writes it back the same", () => {
    const text = `00-${TRACE}-${SPAN}-01`;
    expect(parseTraceparent(text)).toEqual({ traceId: TRACE, spanId: SPAN, traceFlags: 1 });
    expect(formatTraceparent(parseTraceparent(text) as never)).toBe(text);
    expect(parseTraceparent(`00-${TRACE}-${SPAN}-00`)?.traceFlags).toBe(0);
  });

  it("accepts a later version with more fields, as W3C asks of a reader", () => {
    expect(parseTraceparent(`01-${TRACE}-${SPAN}-01-what-comes-next`)).toMatchObject({ traceId: TRACE });
  });

  it.each([
    ["version ff", `ff-${TRACE}-${SPAN}-01`],
    ["version 00 with more fields", `00-${TRACE}-${SPAN}-01-x`],
    ["an all-zero trace id", `00-${"0".repeat(32)}-${SPAN}-01`],
    ["an all-zero span id", `00-${TRACE}-${"0".repeat(16)}-01`],
    ["upper-case hex", `00-${TRACE.toUpperCase()}-${SPAN}-01`],
    ["a short trace id", `00-${TRACE.slice(1)}-${SPAN}-01`],
    ["no flags", `00-${TRACE}-${SPAN}`],
    ["not a string", 42],
    ["a huge string", `00-${TRACE}-${SPAN}-01-${"x".repeat(600)}`],
  ])("refuses %s", (_label, text) => {
    expect(parseTraceparent(text)).toBeUndefined();
  });
});

describe("AWSTraceHeader", () => {
  it("reads the X-Ray root, parent and sampling decision", () => {
    expect(
      parseAwsTraceHeader("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"),
    ).toEqual({ traceId: "5759e988bd862e3fe1be46a994272793", spanId: "53995c3f42cd8ad8", traceFlags: 1 });
    expect(
      parseAwsTraceHeader("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=0")
        ?.traceFlags,
    ).toBe(0);
  });

  it.each([
    ["no parent", "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1"],
    ["no root", "Parent=53995c3f42cd8ad8;Sampled=1"],
    ["a malformed root", "Root=2-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8"],
    ["empty", ""],
  ])("refuses one with %s", (_label, text) => {
    expect(parseAwsTraceHeader(text)).toBeUndefined();
  });
});

describe("a record's creation context", () => {
  const header = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
  it("is its traceparent attribute when it has one, else its AWSTraceHeader, else none", () => {
    const both = {
      attributes: { AWSTraceHeader: header } as never,
      messageAttributes: {
        traceparent: { dataType: "String", stringValue: `00-${TRACE}-${SPAN}-01` },
      } as never,
    };
    expect(creationContext(both)?.traceId).toBe(TRACE);
    expect(creationContext({ ...both, messageAttributes: {} })?.traceId).toBe(
      "5759e988bd862e3fe1be46a994272793",
    );
    expect(creationContext({ attributes: {} as never, messageAttributes: {} })).toBeUndefined();
  });
});

describe("a replay's trace context", () => {
  const source = (body: string) => ({
    id: "dl-1",
    job_id: "j",
    queue: "https://sqs.eu-west-1.amazonaws.com/000000000000/award-points",
    message_attributes: { message_attributes: {} },
    body_form: "text" as const,
    body,
    body_utf16: null,
  });
  const traceparent = `00-${TRACE}-${SPAN}-01`;

  it("is sent as the message's traceparent attribute", () => {
    expect(replayMessage(source("{}"), traceparent).MessageAttributes?.traceparent?.StringValue).toBe(
      traceparent,
    );
  });

  it("is left out when it would make a message SQS took too large to send again", () => {
    const full = "x".repeat(SQS_SEND_LIMITS.messageBytes);
    const message = replayMessage(source(full), traceparent);
    expect(message.MessageAttributes).toBeUndefined();
    expect(messageSize(message)).toBe(SQS_SEND_LIMITS.messageBytes);
  });
});
