/** Job envelopes for a consumer under test, as a producer would send them. */
import { randomUUID } from "node:crypto";

/** The envelope a producer sends: the identity of the job and its payload. */
export interface TestEnvelope<P = unknown> {
  readonly job_id: string;
  readonly tenant_id: string;
  /** Left out unless given: the harness then uses the job id, as it does for any producer. */
  readonly correlation_id?: string;
  readonly payload: P;
}

/** Who a job is, when a test cares. */
export interface JobIdentity {
  /** @default a fresh one per job (`<consumer>-<uuid>`) */
  readonly jobId?: string;
  /** @default {@link DEFAULT_TEST_TENANT} */
  readonly tenantId?: string;
  /** @default none (the job id stands in) */
  readonly correlationId?: string;
}

/** The tenant of jobs that do not name one. */
export const DEFAULT_TEST_TENANT = "tenant-test";

/**
 * An envelope for `consumer`. Every call makes a new job unless `identity.jobId` is given: a
 * duplicate or a conflict is then the test's explicit choice, never an accident of fixtures.
 */
export function testEnvelope<P>(consumer: string, payload: P, identity: JobIdentity = {}): TestEnvelope<P> {
  return {
    job_id: identity.jobId ?? `${consumer}-${randomUUID()}`,
    tenant_id: identity.tenantId ?? DEFAULT_TEST_TENANT,
    ...(identity.correlationId === undefined ? {} : { correlation_id: identity.correlationId }),
    payload,
  };
}
