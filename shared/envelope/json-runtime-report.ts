/**
 * The start-up report of how this runtime reads JSON (parse-json.ts): one log line and one metric
 * per handler created, which in a Lambda is once per cold start.
 */
import type { Logger } from "@aws-lambda-powertools/logger";
import { type Metrics, MetricUnit } from "@aws-lambda-powertools/metrics";
import { METRIC } from "../metrics/names.ts";
import { runtimeMisreadsJsonKeys } from "./parse-json.ts";

/** What {@link reportJsonRuntime} writes to: a Powertools logger, and metrics when the function has them. */
export interface JsonRuntimeReport {
  readonly logger: Pick<Logger, "info" | "warn">;
  readonly metrics?: Pick<Metrics, "addMetric">;
}

/**
 * Says at start-up (a Lambda's init) whether this runtime misreads escaped JSON keys: one log line
 * naming `process.version`, V8's version and the answer (a warning when it does), and, given
 * metrics, `RuntimeJsonKeyMisread` (METRIC.runtimeJsonKeyMisread) as 1 or 0 (published with the first invocation's
 * metrics). Bodies are read correctly either way; this tells operators which runtime they run on.
 */
export function reportJsonRuntime({ logger, metrics }: JsonRuntimeReport): boolean {
  const misreads = runtimeMisreadsJsonKeys();
  const fields = {
    node: process.version,
    v8: process.versions.v8,
    json_key_misread: misreads,
    strict_json_path: "in use for texts with escaped keys",
  };
  if (misreads) {
    logger.warn(
      "this runtime's JSON.parse misreads escaped object keys (nodejs/node#63785); texts with escaped keys are read by jobfence's strict parser",
      fields,
    );
  } else {
    logger.info("this runtime's JSON.parse reads escaped object keys correctly", fields);
  }
  metrics?.addMetric(METRIC.runtimeJsonKeyMisread, MetricUnit.Count, misreads ? 1 : 0);
  return misreads;
}
