/**
 * The package's `jobfence` command, in-process (cli/main.ts), against a real PostgreSQL: `migrate`
 * applies `core` and creates the named consumers' roles and nothing else, `doctor` checks what the
 * definitions declare, and every bad invocation is refused with a message and an exit code.
 */
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runJobfence } from "../../cli/main.ts";
import { consumerRoleName } from "../../shared/db/queries/provision-login.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";

const run = randomBytes(3).toString("hex");
process.env.JOBFENCE_FIXTURE_RUN = run;
const DEFINITIONS = "test/fixtures/service/definitions.ts";

async function jobfence(...argv: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runJobfence(argv, {
    out: (line) => out.push(line),
    err: (line) => err.push(line),
    env: {},
    cwd: process.cwd(),
  });
  return { code, out: out.join("\n"), err: err.join("\n") };
}

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ empty: true });
});
afterAll(async () => {
  await db?.drop();
});

describe("jobfence migrate", () => {
  it("applies core and creates each named consumer's role, and nothing outside core", async () => {
    const first = await jobfence(
      "migrate",
      "--database-url",
      db.url,
      "--consumer",
      `audit-${run}`,
      "--definitions",
      DEFINITIONS,
    );
    expect(first.err).toBe("");
    expect(first.code).toBe(0);
    expect(first.out).toMatch(/applied \d+ core migration\(s\)/);
    const roles = [consumerRoleName(`charge-invoice-${run}`), consumerRoleName(`audit-${run}`)];
    for (const role of roles) expect(first.out).toContain(role);
    const found = await db.withClient(async (c) => {
      const { rows } = await c.query<{ rolname: string }>(
        "SELECT rolname FROM pg_roles WHERE rolname = ANY($1)",
        [roles],
      );
      const schemas = await c.query<{ nspname: string }>(
        "SELECT nspname FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' AND nspname NOT IN ('information_schema', 'public')",
      );
      return { roles: rows.map((r) => r.rolname).sort(), schemas: schemas.rows.map((r) => r.nspname) };
    });
    expect(found.roles).toEqual([...roles].sort());
    expect(found.schemas).toEqual(["core"]);

    const again = await jobfence("migrate", "--database-url", db.url);
    expect(again.code).toBe(0);
    expect(again.out).toMatch(/core is up to date \(\d+ migrations applied earlier\)/);
  });

  it("refuses a bad consumer name before touching the database", async () => {
    const bad = await jobfence("migrate", "--database-url", db.url, "--consumer", "Not A Name");
    expect(bad.code).toBe(1);
    expect(bad.err).toMatch(/consumer name "Not A Name" must be/);
  });

  it("refuses a module that exports no definition", async () => {
    const none = await jobfence("migrate", "--database-url", db.url, "--definitions", "test/support/tier.ts");
    expect(none.code).toBe(1);
    expect(none.err).toMatch(/exports no consumer definition/);
  });

  it("refuses a database that is no connection string, and reports a module that throws a non-Error", async () => {
    const notUrl = await jobfence("migrate", "--database-url", "notaurl");
    expect(notUrl.code).toBe(2);
    expect(notUrl.err).toMatch(/must be a connection string, postgres:\/\/user:password@host:port\/database/);
    const throwing = await jobfence(
      "doctor",
      "--database-url",
      db.url,
      "--definitions",
      "test/fixtures/service/throws.ts",
    );
    expect(throwing.code).toBe(1);
    expect(throwing.err).toContain("the service's configuration is missing");
    expect(throwing.err).not.toContain("undefined");
  });

  it("says which database is missing, and which is unreachable", async () => {
    const missing = await jobfence("migrate");
    expect(missing.code).toBe(2);
    expect(missing.err).toMatch(/--database-url <url> or DATABASE_URL/);
    const unreachable = await jobfence("migrate", "--database-url", "postgres://nobody:secret@127.0.0.1:1/x");
    expect(unreachable.code).toBe(1);
    expect(unreachable.err).toContain("postgres://nobody:***@127.0.0.1:1/x");
    expect(unreachable.err).not.toContain("secret");
  });
});

describe("jobfence doctor", () => {
  // Roles are the cluster's: other files' roles (from tests running beside this one) are findings
  // of their own, so only the findings about this file's consumer are asserted.
  const ours = (out: string) =>
    (JSON.parse(out) as { findings: { where: string; what: string; todo: string }[] }).findings.filter(
      (f) => `${f.where} ${f.what}`.includes(run) || f.where.includes("billing"),
    );

  it("reports a declared table that is missing, with what to do, then nothing once the service made it", async () => {
    const before = await jobfence("doctor", "--database-url", db.url, "--definitions", DEFINITIONS);
    expect(before.code).toBe(1);
    expect(before.out).toMatch(/billing\.invoices/);
    expect(before.out).toMatch(/→ /);
    const missing = ours(
      (await jobfence("doctor", "--database-url", db.url, "--definitions", DEFINITIONS, "--json")).out,
    );
    expect(missing.map((f) => f.where)).toEqual([expect.stringMatching(/billing\.invoices/)]);
    const role = consumerRoleName(`charge-invoice-${run}`);
    await db.withClient((c) =>
      c.query(`CREATE SCHEMA billing; CREATE TABLE billing.invoices (id text PRIMARY KEY);
               GRANT USAGE ON SCHEMA billing TO ${role}; GRANT SELECT, UPDATE ON billing.invoices TO ${role}`),
    );
    const after = await jobfence("doctor", "--database-url", db.url, "--definitions", DEFINITIONS, "--json");
    expect(ours(after.out)).toEqual([]);
  });
});

describe("jobfence", () => {
  it("prints its usage, its version, and refuses an unknown command", async () => {
    expect((await jobfence("--help")).out).toMatch(/Usage: jobfence <command>/);
    expect((await jobfence()).code).toBe(2);
    expect((await jobfence("version")).out).toMatch(/^\d+\.\d+\.\d+/);
    const unknown = await jobfence("migrat");
    expect(unknown.code).toBe(2);
    expect(unknown.err).toMatch(/unknown command "migrat"/);
  });

  it("runs the ops CLI under `ops`, suggesting commands as `jobfence ops`", async () => {
    const help = await jobfence("ops", "--help");
    expect(help.code).toBe(0);
    expect(help.out).toMatch(/^Usage: jobfence ops dead-letters <command>/m);
    // What it suggests can be pasted where the package is installed: no `npm run ops --`.
    const replay = await jobfence("ops", "dead-letters", "replay", "--help");
    expect(replay.out).toMatch(/jobfence ops dead-letters replay <filters…> \| --all {2}--plan/);
    expect(`${help.out}\n${replay.out}`).not.toContain("npm run ops");
  });
});
