/**
 * Trace context as SQS carries it, read and written. Pure.
 *
 * Two carriers: a W3C `traceparent` message attribute (set by a producer instrumented with
 * OpenTelemetry, by a replay, by the outbox relay) and the `AWSTraceHeader` system attribute (set
 * by SQS from the X-Ray header of the call that sent the message). Both name a trace id, a parent
 * span id and whether the trace is sampled; the W3C one wins when a message has both, since it is
 * the one an OpenTelemetry producer wrote on purpose.
 */
import type { SQSRecord } from "aws-lambda";

/** A span's identity in a trace, as W3C trace context writes it. */
export interface TraceParent {
  /** 32 lowercase hex digits, not all zero. */
  readonly traceId: string;
  /** 16 lowercase hex digits, not all zero. */
  readonly spanId: string;
  /** W3C trace flags: 1 = sampled. */
  readonly traceFlags: number;
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;
const AWS_ROOT = /^1-([0-9a-f]{8})-([0-9a-f]{24})$/;
const HEX16 = /^[0-9a-f]{16}$/;

/** The message attribute that carries W3C trace context. */
export const TRACEPARENT_ATTRIBUTE = "traceparent";

/** Parses a W3C `traceparent`; undefined for anything malformed or invalid. */
export function parseTraceparent(text: unknown): TraceParent | undefined {
  if (typeof text !== "string" || text.length > 512) return undefined;
  const m = TRACEPARENT.exec(text.trim());
  if (!m) return undefined;
  const [, version, traceId, spanId, flags, rest] = m as unknown as [
    string,
    string,
    string,
    string,
    string,
    string?,
  ];
  // Version ff is invalid; version 00 has nothing after the flags.
  if (version === "ff" || (version === "00" && rest !== undefined)) return undefined;
  if (/^0+$/.test(traceId) || /^0+$/.test(spanId)) return undefined;
  return { traceId, spanId, traceFlags: Number.parseInt(flags, 16) };
}

/** Parses an X-Ray `AWSTraceHeader` (`Root=1-…;Parent=…;Sampled=1`); undefined without a root and parent. */
export function parseAwsTraceHeader(text: unknown): TraceParent | undefined {
  if (typeof text !== "string" || text.length > 512) return undefined;
  const fields = new Map(
    text.split(";").map((part) => {
      const at = part.indexOf("=");
      return [
        part.slice(0, at).trim(),
        part
          .slice(at + 1)
          .trim()
          .toLowerCase(),
      ] as const;
    }),
  );
  const root = AWS_ROOT.exec(fields.get("Root") ?? "");
  const parent = fields.get("Parent") ?? "";
  if (!root || !HEX16.test(parent)) return undefined;
  const traceId = `${root[1]}${root[2]}`;
  if (/^0+$/.test(traceId) || /^0+$/.test(parent)) return undefined;
  return { traceId, spanId: parent, traceFlags: fields.get("Sampled") === "1" ? 1 : 0 };
}

/** The W3C form of a span's identity. */
export function formatTraceparent(parent: TraceParent): string {
  return `00-${parent.traceId}-${parent.spanId}-${(parent.traceFlags & 0xff).toString(16).padStart(2, "0")}`;
}

/** The context a record's message was created in: its `traceparent` attribute, else its AWSTraceHeader. */
export function creationContext(
  record: Pick<SQSRecord, "attributes" | "messageAttributes">,
): TraceParent | undefined {
  const attribute = record.messageAttributes?.[TRACEPARENT_ATTRIBUTE];
  return (
    parseTraceparent(attribute?.stringValue) ??
    parseAwsTraceHeader((record.attributes as { AWSTraceHeader?: unknown } | undefined)?.AWSTraceHeader)
  );
}
