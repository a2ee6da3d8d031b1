/**
 * OpenTelemetry spans for the record path, through `@opentelemetry/api` alone: without an SDK
 * registered (ADOT's layer, or the deployment's own) every call is the API's no-op, which still
 * carries a parent's context through, so the trace context a message arrived with reaches its
 * dead letter, its replay and its follow-ups either way.
 *
 * One `process <queue>` span per record (kind CONSUMER, the messaging semantic conventions'
 * attributes), a child of the context the message was created in and linked to it (and to the
 * invocation's span when there is one), so one trace runs from the producer through every
 * delivery, dead letter, replay and follow-up. Its outcome is set when the record's outcome is
 * known; a record the invocation never reported is ended as returned.
 */
import {
  type Attributes,
  context,
  type Link,
  type Span,
  type SpanContext,
  SpanKind,
  SpanStatusCode,
  trace,
} from "@opentelemetry/api";
import type { SQSRecord } from "aws-lambda";
import { describeError } from "../errors/last-error.ts";
import { creationContext, formatTraceparent, parseTraceparent, type TraceParent } from "./trace-context.ts";

/** The instrumentation scope of every jobfence span. */
export const TRACER_NAME = "jobfence";

/**
 * Looked up at each span, not once: the global provider may be registered (or replaced) after this
 * module is loaded, and a tracer kept from before would keep the provider it was made by.
 */
function tracer() {
  return trace.getTracer(TRACER_NAME);
}

function spanContextOf(parent: TraceParent): SpanContext {
  return { traceId: parent.traceId, spanId: parent.spanId, traceFlags: parent.traceFlags, isRemote: true };
}

/** A span's context as a W3C `traceparent`, or null when it has none (no parent, no SDK). */
export function traceparentOf(span: Span | undefined): string | null {
  const sc = span?.spanContext();
  if (!sc || !trace.isSpanContextValid(sc)) return null;
  return formatTraceparent(sc);
}

/** The queue's name from an SQS ARN (its last field). */
function queueNameOf(arn: string | undefined): string {
  return arn?.split(":").at(-1) || "unknown";
}

/** Starts the `process` span of one record. */
export function startProcessSpan(record: SQSRecord, consumer: string): Span {
  const created = creationContext(record);
  const active = trace.getSpanContext(context.active());
  const links: Link[] = [];
  let parent = context.active();
  if (created) {
    const sc = spanContextOf(created);
    links.push({ context: sc });
    if (active && trace.isSpanContextValid(active)) links.push({ context: active });
    parent = trace.setSpanContext(parent, sc);
  }
  const queue = queueNameOf(record.eventSourceARN);
  const attributes: Attributes = {
    "messaging.system": "aws_sqs",
    "messaging.operation.type": "process",
    "messaging.operation.name": "process",
    "messaging.destination.name": queue,
    "messaging.message.id": record.messageId,
    "jobfence.consumer": consumer,
    "jobfence.receive_count": Number(record.attributes?.ApproximateReceiveCount ?? 1),
  };
  return tracer().startSpan(`process ${queue}`, { kind: SpanKind.CONSUMER, links, attributes }, parent);
}

/** Runs `fn` with `span` as the active span: what the work does (its queries) is traced under it. */
export function inSpan<T>(span: Span | undefined, fn: () => T): T {
  return span ? context.with(trace.setSpan(context.active(), span), fn) : fn();
}

/**
 * What a span records of a record's outcome: the shape of the spine's RecordOutcome, as far as a
 * span reads it (declared here, so tracing depends on nothing of the record path).
 */
export type SpanOutcome =
  | {
      readonly status: "dead-lettered";
      readonly kind: string;
      readonly deadLetterId: string;
      readonly error: unknown;
    }
  | {
      readonly status: "retry";
      readonly attempt: number;
      readonly delaySeconds: number | null;
      readonly error: unknown;
    }
  | { readonly status: "dead-letter-failed" | "failed"; readonly error: unknown }
  | { readonly status: "applied" | "duplicate" | "held" | "interrupted" | "returned" };

/** Ends a record's span with its outcome. */
export function endProcessSpan(
  span: Span,
  outcome: SpanOutcome,
  identity?: { jobId: string; correlationId: string },
): void {
  // A span that is not recording (the API's no-op without an SDK, or one not sampled) drops every
  // attribute, event and status it is given: only its end is left to do.
  if (!span.isRecording()) {
    span.end();
    return;
  }
  if (identity) {
    span.setAttribute("jobfence.job_id", identity.jobId);
    span.setAttribute("messaging.message.conversation_id", identity.correlationId);
  }
  span.setAttribute("jobfence.outcome", outcome.status);
  switch (outcome.status) {
    case "dead-lettered":
      span.setAttribute("jobfence.error_kind", outcome.kind);
      span.setAttribute("jobfence.dead_letter_id", outcome.deadLetterId);
      span.setStatus({ code: SpanStatusCode.ERROR, message: `dead-lettered: ${outcome.kind}` });
      recordError(span, outcome.error);
      break;
    case "retry":
      span.addEvent("retry scheduled", {
        "jobfence.attempt": outcome.attempt,
        ...(outcome.delaySeconds === null ? {} : { "jobfence.delay_seconds": outcome.delaySeconds }),
      });
      recordError(span, outcome.error);
      break;
    case "dead-letter-failed":
    case "failed":
      span.setStatus({ code: SpanStatusCode.ERROR, message: outcome.status });
      recordError(span, outcome.error);
      break;
    default:
      break;
  }
  span.end();
}

function recordError(span: Span, error: unknown): void {
  const described = describeError(error);
  span.recordException({ name: described.class, message: described.message });
}

/**
 * The spans of one consumer's records, one per record of the invocation being handled: started
 * when the record's path begins (the batch's shared transaction, or the record's own chain), ended
 * with its outcome, and the rest ended as returned when the invocation ends.
 */
export class RecordSpans {
  readonly #consumer: string;
  readonly #open = new Map<SQSRecord, Span>();

  constructor(consumer: string) {
    this.#consumer = consumer;
  }

  /** The record's span, started the first time it is asked for. */
  of(record: SQSRecord): Span {
    let span = this.#open.get(record);
    if (!span) {
      span = startProcessSpan(record, this.#consumer);
      this.#open.set(record, span);
    }
    return span;
  }

  /** Ends the record's span with its outcome (no-op when it has none open). */
  end(record: SQSRecord, outcome: SpanOutcome, identity?: { jobId: string; correlationId: string }): void {
    const span = this.#open.get(record);
    if (!span) return;
    this.#open.delete(record);
    endProcessSpan(span, outcome, identity);
  }

  /** Ends, as returned to the queue, the spans of `records` still open (the invocation has ended). */
  endRest(records: readonly SQSRecord[]): void {
    for (const record of records) {
      const span = this.#open.get(record);
      if (!span) continue;
      this.#open.delete(record);
      endProcessSpan(span, { status: "returned" });
    }
  }
}

/**
 * The trace context a replay sends: a short `send <queue>` span (kind PRODUCER), a child of the
 * context the dead letter stored, so the replayed delivery continues the original trace. Null when
 * there is none to continue and no SDK to start one.
 */
export function replayTraceparent(
  stored: Record<string, unknown>,
  queueUrl: string,
  deadLetterId: string,
): string | null {
  const original = storedTraceContext(stored);
  const parent = original
    ? trace.setSpanContext(context.active(), spanContextOf(original))
    : context.active();
  const queue = queueUrl.split("/").at(-1) || "unknown";
  const span = tracer().startSpan(
    `send ${queue}`,
    {
      kind: SpanKind.PRODUCER,
      attributes: {
        "messaging.system": "aws_sqs",
        "messaging.operation.type": "send",
        "messaging.destination.name": queue,
        "jobfence.replay_of": deadLetterId,
      },
    },
    parent,
  );
  const traceparent = traceparentOf(span);
  span.end();
  return traceparent;
}

/**
 * The trace context a dead letter stored: the span that dead-lettered it (`trace_context`), else
 * the context its message arrived with.
 */
export function storedTraceContext(stored: Record<string, unknown>): TraceParent | undefined {
  const attributes = (stored.message_attributes ?? {}) as Record<
    string,
    { stringValue?: unknown } | undefined
  >;
  return (
    parseTraceparent(stored.trace_context) ??
    creationContext({
      attributes: { AWSTraceHeader: stored.aws_trace_header } as unknown as SQSRecord["attributes"],
      messageAttributes: attributes as SQSRecord["messageAttributes"],
    })
  );
}

export type { TraceParent };
