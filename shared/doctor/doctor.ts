/**
 * The doctor: a live database and the consumers' queues against what jobfence intends. `diagnose`
 * runs every check on what was read (pure); `runDoctor` reads it (the catalogs, the migration
 * history, each consumer's schemas and committed description, SQS) and diagnoses. Each finding
 * says what is wrong, where, and what to do.
 */
import type { SQSClient } from "@aws-sdk/client-sqs";
import { type CatalogSnapshot, readCatalog } from "../db/catalog.ts";
import { type CatalogDescription, describeCore, loadExpectedCoreCatalog } from "../db/catalog-description.ts";
import {
  type ConsumerSchemaDescription,
  describeConsumerSchema,
  loadConsumerSchema,
  readConsumerCatalog,
} from "../db/consumer-catalog.ts";
import type { MigrationSet } from "../db/migrations.ts";
import type { Queryable } from "../db/queryable.ts";
import { checkConsumerSchema, checkCoreCatalog, missingConsumerSchema } from "./check-catalog.ts";
import { checkDeclaredData } from "./check-declared-data.ts";
import { checkDefinerFunctions } from "./check-functions.ts";
import { checkMigrations } from "./check-migrations.ts";
import { checkOwnership } from "./check-ownership.ts";
import { checkPrivileges } from "./check-privileges.ts";
import { checkPublicReach } from "./check-public-reach.ts";
import {
  checkQueues,
  checkReplayQueues,
  type ExpectedConsumerQueues,
  type ObservedConsumerQueues,
} from "./check-queues.ts";
import { checkReach } from "./check-reach.ts";
import { checkRoles } from "./check-roles.ts";
import { consumersOf } from "./consumer-coverage.ts";
import { type DeclaredConsumerData, declaredSchemas } from "./declared-data.ts";
import { CHECK, type DoctorReport, type Finding, type Skipped } from "./findings.ts";
import { observeQueues } from "./read-queues.ts";

/** A consumer and the file of the committed description of its schemas (its `schema.txt`). */
export interface ConsumerSchemaFile {
  readonly consumer: string;
  /** An absolute path. */
  readonly file: string;
}

/** A consumer's schemas as committed and as the database has them; nothing when none is committed. */
export type ConsumerSchemaComparison = ConsumerSchemaFile &
  (
    | { readonly expected: undefined }
    | { readonly expected: ConsumerSchemaDescription; readonly actual: ConsumerSchemaDescription }
  );

/** What {@link diagnose} checks. */
export interface DiagnoseInput {
  readonly catalog: CatalogSnapshot;
  /** What `core` should be: the committed description. */
  readonly expectedCatalog: CatalogDescription;
  /** The deployment's migration sets (functions/migrate/sets.ts). */
  readonly sets: readonly MigrationSet[];
  /** Each consumer's schemas, committed and live. @default not checked */
  readonly consumerSchemas?: readonly ConsumerSchemaComparison[];
  /**
   * What each consumer declares it works on outside core (its definition's `data`): a consumer's
   * role's privilege there that is not declared is a finding. @default none: every consumer
   * works on its own schema only
   */
  readonly declarations?: readonly DeclaredConsumerData[];
  /** The consumers' queues, expected and as read. @default not checked */
  readonly queues?: {
    readonly expected: readonly ExpectedConsumerQueues[];
    readonly observed: readonly ObservedConsumerQueues[];
  };
}

/** Every finding of `input`. Pure. */
export function diagnose(input: DiagnoseInput): DoctorReport {
  const { catalog } = input;
  const findings: Finding[] = [];
  const skipped: Skipped[] = [];
  if (catalog.migrator === undefined) {
    findings.push({
      check: CHECK.migrations,
      where: "schema core",
      what: "does not exist: this database has never been migrated",
      todo: "run the migrations (a deploy runs them; by hand `jobfence migrate`, or in the jobfence repository `npm run migrate` or `npm start`), or check the database name",
    });
  } else {
    findings.push(...checkCoreCatalog(input.expectedCatalog, describeCore(catalog)));
    for (const schema of input.consumerSchemas ?? []) {
      findings.push(
        ...(schema.expected === undefined
          ? [missingConsumerSchema(schema.consumer, schema.file)]
          : checkConsumerSchema(schema.expected, schema.actual, {
              registryReadable: catalog.consumerRoles !== undefined,
            })),
      );
    }
    if (catalog.migrationHistory === undefined) {
      skipped.push({
        check: CHECK.migrations,
        reason:
          `${catalog.readAs} may not read core.schema_migrations (only the migrator may); the comparison of core ` +
          "with its description still shows a core migration that is missing",
      });
    } else {
      findings.push(...checkMigrations(catalog.migrationHistory, input.sets));
    }
    const declarations = input.declarations ?? [];
    const setConsumers = input.sets.flatMap((set) => (set.consumer === undefined ? [] : [set.consumer]));
    const consumers = consumersOf(catalog, declarations, setConsumers);
    findings.push(
      ...checkRoles(catalog),
      ...checkPrivileges(catalog),
      ...checkDeclaredData({ snapshot: catalog, declarations, consumers: setConsumers }),
      ...checkReach(catalog, consumers),
      ...checkPublicReach(catalog, consumers),
      ...checkDefinerFunctions(catalog),
      ...checkOwnership(catalog),
    );
  }
  if (input.queues) {
    findings.push(...checkQueues(input.queues.expected, input.queues.observed));
    if (catalog.consumerRoles !== undefined) {
      findings.push(...checkReplayQueues(catalog.consumerRoles, input.queues.observed));
    }
  }
  return { findings, skipped, readAs: catalog.readAs };
}

/** Options of {@link runDoctor}. */
export interface DoctorOptions {
  /** The database, as any role; the ops login sees everything but the migration history. */
  readonly db: Queryable;
  /** The deployment's migration sets (functions/migrate/sets.ts). */
  readonly sets: readonly MigrationSet[];
  /** @default the committed description of `core` (loadExpectedCoreCatalog) */
  readonly expectedCatalog?: CatalogDescription;
  /**
   * The consumers whose schemas are compared with their committed descriptions (the deployment's:
   * `deploymentConsumerSchemas` in functions/doctor/doctor.ts). @default none
   */
  readonly consumerSchemas?: readonly ConsumerSchemaFile[];
  /** What each consumer declares it works on outside core (see {@link DiagnoseInput}). @default none */
  readonly declarations?: readonly DeclaredConsumerData[];
  /** The consumers' queues and the client to read them with. @default not checked */
  readonly queues?: { readonly sqs: SQSClient; readonly expected: readonly ExpectedConsumerQueues[] };
}

/** Reads the database (and the queues) and diagnoses them. */
export async function runDoctor(options: DoctorOptions): Promise<DoctorReport> {
  const catalog = await readCatalog(options.db);
  const consumerSchemas: ConsumerSchemaComparison[] = [];
  // The service's schemas a consumer declares are checked against its declaration, not described as its own.
  const sharedSchemasOf = (consumer: string) => {
    const declared = options.declarations?.find((d) => d.consumer === consumer);
    return declared === undefined ? [] : declaredSchemas(declared.data);
  };
  // Never migrated: diagnose reports that alone.
  if (catalog.migrator !== undefined) {
    for (const { consumer, file } of options.consumerSchemas ?? []) {
      const expected = loadConsumerSchema(file);
      consumerSchemas.push(
        expected === undefined
          ? { consumer, file, expected }
          : {
              consumer,
              file,
              expected,
              actual: describeConsumerSchema(
                await readConsumerCatalog(options.db, consumer, catalog, sharedSchemasOf(consumer)),
              ),
            },
      );
    }
  }
  const queues = options.queues
    ? {
        expected: options.queues.expected,
        observed: await observeQueues(options.queues.sqs, options.queues.expected),
      }
    : undefined;
  return diagnose({
    catalog,
    expectedCatalog: options.expectedCatalog ?? loadExpectedCoreCatalog(),
    sets: options.sets,
    consumerSchemas,
    ...(options.declarations ? { declarations: options.declarations } : {}),
    ...(queues ? { queues } : {}),
  });
}
