/**
 * How every jobfence construct makes its alarms: one factory, so that they all fire the same way
 * (one period above the threshold; missing data is not breaching, since the failure metrics are
 * only emitted when something fails and SQS stops reporting an idle queue's metrics), are named so
 * that one prefix matches every alarm of the stack, and notify the deployment's alarm actions.
 */
import { Stack } from "aws-cdk-lib";
import * as cloudwatch from "aws-cdk-lib/aws-cloudwatch";
import type { Construct, IConstruct } from "constructs";

/** Separates the stack's name from the rest of an alarm name (stack names cannot contain it). */
const ALARM_NAME_SEPARATOR = "/";

/** `<stack name>/`: every alarm {@link alarmNameOf} names starts with it, and the forwarding rule matches it. */
export function alarmNamePrefix(scope: IConstruct): string {
  return `${Stack.of(scope).stackName}${ALARM_NAME_SEPARATOR}`;
}

/**
 * The name of the alarm `alarmId` created in `scope`: the stack's name, then its construct path
 * below the stack (`Jobfence/Consumer-award-points/DeadLetterWriteFailedAlarm`). Unique in the
 * account and region, readable in a notification, and one prefix matches every alarm of the stack
 * (a rule listing alarms by ARN outgrows EventBridge's 2,048-character pattern after a dozen).
 */
export function alarmNameOf(scope: IConstruct, alarmId: string): string {
  const stack = Stack.of(scope);
  const below = scope.node.scopes.slice(stack.node.scopes.length).map((s) => s.node.id);
  return `${alarmNamePrefix(scope)}${[...below, alarmId].join(ALARM_NAME_SEPARATOR)}`;
}

/** Makes one alarm: `alarmId` in the factory's scope, firing when `metric` is above `threshold`. */
export type AlarmFactory = (
  alarmId: string,
  metric: cloudwatch.IMetric,
  threshold: number,
  description: string,
) => cloudwatch.Alarm;

/** Options of {@link alarmFactory}. */
export interface AlarmFactoryOptions {
  /** Where every alarm notifies. @default none (the alarms are still created) */
  readonly actions?: readonly cloudwatch.IAlarmAction[];
  /**
   * Name each alarm with {@link alarmNameOf}, which the forwarding rule to BetterStack matches.
   * @default true; false only for an alarm that must not reach BetterStack (it reports BetterStack failing)
   */
  readonly named?: boolean;
}

/** The alarm factory of `scope`. */
export function alarmFactory(scope: Construct, options: AlarmFactoryOptions = {}): AlarmFactory {
  const { actions = [], named = true } = options;
  return (alarmId, metric, threshold, description) => {
    const alarm = new cloudwatch.Alarm(scope, alarmId, {
      ...(named ? { alarmName: alarmNameOf(scope, alarmId) } : {}),
      metric,
      threshold,
      evaluationPeriods: 1,
      comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      alarmDescription: description,
    });
    for (const action of actions) alarm.addAlarmAction(action);
    return alarm;
  };
}
