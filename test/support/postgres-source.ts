/**
 * Chooses the PostgreSQL the test run uses, in this order: `DATABASE_URL` when set; a
 * testcontainers PostgreSQL when a container runtime answers; otherwise an embedded PostgreSQL
 * started for the run. The URL is an administrative one: the suite creates a database per test
 * file beside it, so its user needs CREATEDB and CREATEROLE (a superuser in practice).
 */
import { startEmbeddedPostgres } from "../../local/postgres.ts";

/** A server the run can use, and how to let go of it. */
export interface PostgresSource {
  readonly kind: "DATABASE_URL" | "testcontainers" | "embedded";
  readonly adminUrl: string;
  release(): Promise<void>;
}

/** The image used when a container runtime is available; matches the embedded major version. */
export const CONTAINER_IMAGE = "postgres:18-alpine";

export async function acquirePostgres(env: NodeJS.ProcessEnv = process.env): Promise<PostgresSource> {
  if (env.DATABASE_URL) {
    return { kind: "DATABASE_URL", adminUrl: env.DATABASE_URL, release: async () => {} };
  }
  const container = await startContainerIfRuntime();
  if (container) return container;
  const embedded = await startEmbeddedPostgres({ durability: "fast" });
  return { kind: "embedded", adminUrl: embedded.url, release: () => embedded.stop() };
}

async function startContainerIfRuntime(): Promise<PostgresSource | undefined> {
  const { getContainerRuntimeClient } = await import("testcontainers");
  try {
    // Without a runtime this throws within milliseconds: a cheap probe.
    await getContainerRuntimeClient();
  } catch {
    return undefined;
  }
  const { PostgreSqlContainer } = await import("@testcontainers/postgresql");
  const started = await new PostgreSqlContainer(CONTAINER_IMAGE)
    .withCommand(["postgres", "-c", "fsync=off", "-c", "max_connections=300"])
    .start();
  return {
    kind: "testcontainers",
    adminUrl: started.getConnectionUri(),
    release: () => started.stop().then(() => {}),
  };
}
