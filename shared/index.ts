/**
 * jobfence's public surface: what a consumer author, a producer and the functions that host them
 * import. Everything else under shared/ is the library's own and may change without notice.
 */

// Every AWS SDK client the library builds, with connection and request timeouts.
export {
  AWS_CLIENT_DEFAULTS,
  type AwsClientOptions,
  type AwsClientTimeouts,
  createEventBridgeClient,
  createSecretsManagerClient,
  createSqsClient,
} from "./aws/clients.ts";
// The backstop drain, one per consumer.
export {
  type BackstopDrainConfig,
  type BackstopDrainHandler,
  type BackstopDrainRuntime,
  createBackstopDrain,
  drainConfigFromEnv,
  parseDrainConfig,
} from "./backstop/drain.ts";
export type { ConsumerConfig, ConsumerConfigInput } from "./config/consumer-config.ts";
// The consumer factory and what a definition is made of.
export {
  type CommitMode,
  type ConsumerDefinition,
  type ConsumerHandler,
  type ConsumerRuntime,
  createConsumer,
  type OutcomeObserver,
  type Transaction,
  type WorkJob,
  type WorkQueries,
} from "./consumer.ts";
export { BODY_FORM, BODY_FORMS, type BodyForm } from "./db/stored-body.ts";
export { DEAD_LETTER_STATUS, DEAD_LETTER_STATUSES, type DeadLetterStatus } from "./dead-letters/status.ts";
export {
  type DataDeclaration,
  RELATION_PRIVILEGES,
  type RelationPrivilege,
  type SchemaUse,
  type Sharing,
  type TableUse,
} from "./doctor/declared-data.ts";
export { canonicalJson } from "./envelope/canonical-json.ts";
// The envelope, and what identifies a job: schemas for payload strings the database stores, the
// fingerprint a producer can compute to check two messages are the same job.
export { envelopeSchema, type Job, storableText } from "./envelope/envelope.ts";
export { FINGERPRINT_BYTES, fingerprintHex, jobFingerprint } from "./envelope/fingerprint.ts";
export { STEP_KEY_LENGTH, STEP_NAME, STEPS_PER_JOB, stepKey } from "./envelope/step-key.ts";
// Every error jobfence throws on purpose, under JobfenceError.
export * from "./errors/alert.ts";
export * from "./errors/bulk-operation.ts";
export * from "./errors/configuration.ts";
export * from "./errors/database.ts";
export * from "./errors/dead-letter.ts";
export { ERROR_KIND, ERROR_KINDS, type ErrorKind } from "./errors/error-kind.ts";
export * from "./errors/http.ts";
export * from "./errors/job.ts";
export * from "./errors/jobfence-error.ts";
export * from "./errors/migration.ts";
export * from "./errors/sending.ts";
export * from "./errors/step.ts";
export * from "./errors/transaction.ts";
export { TTL_DEFAULTS, validateFenceTtl } from "./fence/ttl.ts";
export type {
  FollowUp,
  FollowUpSchemas,
  FollowUpTarget,
  SendFollowUp,
} from "./outbox/follow-up.ts";
// The producer side: typed envelopes, deterministic job ids, and sending jobs to a consumer's queue.
export { fifoDeduplicationId, messageGroupId } from "./producer/fifo-ids.ts";
export {
  type JobEnvelope,
  type JobFields,
  jobEnvelope,
  type PayloadSource,
} from "./producer/job-envelope.ts";
export {
  DERIVED_JOB_ID_MAX_LENGTH,
  deriveJobId,
  JOB_ID_NAMESPACE,
  type JobIdKey,
} from "./producer/job-id.ts";
export {
  type FailedJob,
  type JobToSend,
  SEND_FAILURE_CODE,
  type SendJobsOptions,
  type SendJobsResult,
  type SentJob,
  sendJobs,
} from "./producer/send-jobs.ts";
export { DEFAULT_SEND_RETRY, type SendRetryPolicy } from "./producer/send-policy.ts";
// What a record can become, and the dead letters' vocabulary.
export type { RecordOutcome } from "./record/outcome.ts";
export { DEFAULT_RETRY_POLICY, type RetryOverride, type RetryPolicy } from "./retry/policy.ts";
// Steps: a job's calls outside the database, with provider idempotency keys.
export {
  STEP_RESULT_MAX_BYTES,
  type StepCallOptions,
  type StepJob,
  type StepSettings,
  type StepsFunction,
} from "./steps/run-steps.ts";
