/** The metrics jobfence's functions emit, as CloudWatch sees them: namespace `jobfence`, one `service` each. */
import * as cloudwatch from "aws-cdk-lib/aws-cloudwatch";
import { METRICS_NAMESPACE } from "../../shared/metrics/names.ts";

/** The metric `metricName` that the function emitting as `service` publishes. */
export function jobfenceMetric(
  service: string,
  metricName: string,
  options: cloudwatch.MetricOptions = {},
): cloudwatch.Metric {
  return new cloudwatch.Metric({
    namespace: METRICS_NAMESPACE,
    metricName,
    dimensionsMap: { service },
    ...options,
  });
}
