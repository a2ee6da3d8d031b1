/** What the doctor function reads from its environment. */
import { z } from "zod";
import {
  CONSUMER_NAME,
  DATABASE_ENV,
  databaseFields,
  jsonField,
  withDatabaseCheck,
} from "../../shared/config/fields.ts";
import { configFromEnv } from "../../shared/config/parse.ts";
import { declaredConsumerDataSchema } from "../../shared/doctor/declared-data.ts";

/** The doctor function's Powertools `service`: its metric's dimension, its logs' service. */
export const DOCTOR_SERVICE = "doctor";

/** Metric names of a doctor run. */
export const DOCTOR_METRIC = {
  /** Findings of the run; 0 when the database and the queues are as intended. */
  findings: "DoctorFindings",
} as const;

const seconds = z.number().int().min(0);
const queueName = z.string().regex(/^[A-Za-z0-9_-]{1,75}(\.fifo)?$/, "must be an SQS queue name");

/** One consumer's queues as the stack deploys them (`expectedQueues` in functions/consumers.ts). */
const expectedConsumerQueues = z
  .object({
    consumer: z.string().regex(CONSUMER_NAME, "must be a consumer name"),
    source: z
      .object({
        name: queueName,
        retentionSeconds: seconds,
        visibilityTimeoutSeconds: seconds,
        maxReceiveCount: z.number().int().min(1),
      })
      .strict(),
    backstop: z.object({ name: queueName, retentionSeconds: seconds }).strict(),
  })
  .strict();

const expectedQueuesJson = jsonField(z.array(expectedConsumerQueues));

const schema = withDatabaseCheck(
  z.object({
    /** The ops login: a connection string, or its secret and endpoint. */
    ...databaseFields,
    expectedQueues: expectedQueuesJson,
    declarations: jsonField(declaredConsumerDataSchema).optional(),
  }),
);

export const DOCTOR_ENV = Object.freeze({
  ...DATABASE_ENV,
  /** JSON: `[{"consumer": "award-points", "source": {…}, "backstop": {…}}, …]`, written by the Doctor construct. */
  expectedQueues: "JOBFENCE_DOCTOR_QUEUES",
  /**
   * JSON: `[{"consumer": "record-payment", "data": {"tables": {"billing.invoices": {"privileges": ["SELECT"]}}}}, …]`,
   * each consumer's definition's `data`, written by the Doctor construct; unset checks no declared data
   * (the reference deployment's entry falls back on its registry's).
   */
  declarations: "JOBFENCE_DOCTOR_DECLARATIONS",
});

export type DoctorConfig = z.output<typeof schema>;

export function doctorConfigFromEnv(env: NodeJS.ProcessEnv): DoctorConfig {
  return configFromEnv(schema, DOCTOR_ENV, env, "doctor function");
}
