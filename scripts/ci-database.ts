/**
 * Used by .ci/run: `create <adminUrl>` makes a fresh database beside the admin URL's and prints
 * its URL; `drop <url>` drops it again; `probe <adminUrl>` exits 0 when the server answers.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";

const [command, url] = process.argv.slice(2);
if (!command || !url) {
  console.error("usage: ci-database.ts create|drop|probe <url>");
  process.exit(2);
}

async function withClient<T>(connectionString: string, fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString, connectionTimeoutMillis: 3000 });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

const target = new URL(url);
if (command === "probe") {
  await withClient(url, (c) => c.query("SELECT 1")).then(
    () => process.exit(0),
    () => process.exit(1),
  );
} else if (command === "create") {
  const name = `jobfence_ci_${randomBytes(4).toString("hex")}`;
  await withClient(url, (c) => c.query(`CREATE DATABASE ${name}`));
  target.pathname = `/${name}`;
  console.log(target.toString());
} else if (command === "drop") {
  const name = target.pathname.slice(1);
  target.pathname = "/postgres";
  await withClient(target.toString(), (c) =>
    c.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(name)} WITH (FORCE)`),
  );
} else {
  console.error(`unknown command ${command}`);
  process.exit(2);
}
