/**
 * `jobfence migrate` as a function: brings a database's `core` schema up to date and creates the
 * group role of each of the service's consumers, which the service's own migrations then grant its
 * tables to. jobfence applies nothing outside `core` (and the consumers' roles); the service's
 * tables are its migration tool's.
 */
import { type MigrationReport, runMigrations } from "../db/migrate.ts";
import { coreMigrationSet, type MigrationSet } from "../db/migrations.ts";
import { checkServiceConsumers, type ServiceConsumer } from "./service-consumers.ts";

/** Options of {@link migrateDatabase}. */
export interface MigrateDatabaseOptions {
  /** The database, as the migrator: it owns `core` and needs CREATEROLE. */
  readonly databaseUrl: string;
  /**
   * The service's consumers (their definitions will do): each one's group role is created
   * (`jobfence_consumer_<name>`) and registered. @default none
   */
  readonly consumers?: readonly ServiceConsumer[];
  /**
   * Migration sets applied after `core`, for a deployment that keeps a consumer's tables in a set
   * jobfence runs (this repository's reference consumers). @default none
   */
  readonly sets?: readonly MigrationSet[];
  /** One line per applied migration. @default no output */
  readonly log?: (line: string) => void;
  /** How long to wait for another runner. @default the runner's (ten minutes) */
  readonly lockWaitMs?: number;
}

/** Applies `core`'s pending migrations (and `sets`), then ensures each consumer's role. */
export async function migrateDatabase(options: MigrateDatabaseOptions): Promise<MigrationReport> {
  // Checked before connecting: a bad name changes nothing in the database.
  const consumers = checkServiceConsumers("migrate", options.consumers ?? []).map((c) => c.consumer);
  return runMigrations({
    connectionString: options.databaseUrl,
    sets: [coreMigrationSet(), ...(options.sets ?? [])],
    consumers,
    ...(options.log ? { log: options.log } : {}),
    ...(options.lockWaitMs === undefined ? {} : { lockWaitMs: options.lockWaitMs }),
  });
}
