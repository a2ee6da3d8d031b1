/**
 * `jobfence doctor` as a function: checks a database's `core`, roles and grants, and each
 * consumer's privileges outside `core` against what its definition declares (`data`), and
 * optionally the consumers' queues. Returns the report; printing and the exit code are the
 * caller's (formatFinding in shared/doctor/findings.ts prints one finding).
 */

import type { SQSClient } from "@aws-sdk/client-sqs";
import pg from "pg";
import type { MigrationSet } from "../db/migrations.ts";
import { coreMigrationSet } from "../db/migrations.ts";
import type { ExpectedConsumerQueues } from "../doctor/check-queues.ts";
import { type ConsumerSchemaFile, runDoctor } from "../doctor/doctor.ts";
import type { DoctorReport } from "../doctor/findings.ts";
import { checkServiceConsumers, type ServiceConsumer } from "./service-consumers.ts";

/** Named defaults of {@link doctorDatabase}. */
export const DOCTOR_DATABASE_DEFAULTS = Object.freeze({
  /** Each catalog query's bound: they read catalogs only, so anything slower is a stuck session. */
  statementTimeoutMs: 30_000,
  applicationName: "jobfence:doctor",
});

/** Options of {@link doctorDatabase}. */
export interface DoctorDatabaseOptions {
  /** The database, as the migrator or the ops login (which may not read the migration history). */
  readonly databaseUrl: string;
  /** The service's consumers (their definitions will do), with what each declares it works on. @default none */
  readonly consumers?: readonly ServiceConsumer[];
  /** The migration sets the database should have. @default [the core set] */
  readonly sets?: readonly MigrationSet[];
  /** Consumers whose own schema is compared with a committed description. @default none */
  readonly consumerSchemas?: readonly ConsumerSchemaFile[];
  /** The consumers' queues and the client to read them with. @default not checked */
  readonly queues?: { readonly sqs: SQSClient; readonly expected: readonly ExpectedConsumerQueues[] };
}

/** Connects, diagnoses and disconnects. Throws a ConfigurationError for a bad `consumers` before connecting. */
export async function doctorDatabase(options: DoctorDatabaseOptions): Promise<DoctorReport> {
  const declarations = checkServiceConsumers("doctor", options.consumers ?? []);
  const client = new pg.Client({
    connectionString: options.databaseUrl,
    application_name: DOCTOR_DATABASE_DEFAULTS.applicationName,
    statement_timeout: DOCTOR_DATABASE_DEFAULTS.statementTimeoutMs,
  });
  await client.connect();
  try {
    return await runDoctor({
      db: client,
      sets: options.sets ?? [coreMigrationSet()],
      declarations,
      ...(options.consumerSchemas ? { consumerSchemas: options.consumerSchemas } : {}),
      ...(options.queues ? { queues: options.queues } : {}),
    });
  } finally {
    await client.end().catch(() => {});
  }
}
