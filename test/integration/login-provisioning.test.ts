/**
 * Function logins created on deploy (migration 0006): the SCRAM verifier the client computes is the
 * one PostgreSQL would, the login gets exactly its group role, and everything else is refused.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { provisionLogins } from "../../functions/migrate/logins.ts";
import { GROUP_ROLES, provisionLogin } from "../../shared/db/queries/provision-login.ts";
import { parseScramVerifier, scramSha256Verifier } from "../../shared/db/scram.ts";
import { createTestDatabase, type TestDatabase } from "../support/database.ts";
import { expectRefused, SQLSTATE } from "../support/expect-pg.ts";

const INVALID_PARAMETER = "22023";
let db: TestDatabase;
/** Roles are cluster-wide: every name is unique to this run and dropped afterwards. */
const created: string[] = [];
const loginName = (label: string) => {
  const name = `jft_${label}_${randomBytes(4).toString("hex")}`;
  created.push(name);
  return name;
};

beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db?.withClient(async (client) => {
    for (const name of created) await client.query(`DROP ROLE IF EXISTS ${name}`);
  });
  await db?.drop();
});

async function storedVerifier(client: pg.ClientBase, role: string): Promise<string> {
  const { rows } = await client.query<{ rolpassword: string }>(
    "SELECT rolpassword FROM pg_authid WHERE rolname = $1",
    [role],
  );
  return rows[0]?.rolpassword ?? "";
}

async function memberships(client: pg.ClientBase, role: string): Promise<string[]> {
  const { rows } = await client.query<{ rolname: string }>(
    `SELECT g.rolname FROM pg_auth_members m
       JOIN pg_roles g ON g.oid = m.roleid JOIN pg_roles u ON u.oid = m.member
      WHERE u.rolname = $1 ORDER BY 1`,
    [role],
  );
  return rows.map((r) => r.rolname);
}

/** Whether `password` is the one the stored verifier was made from. */
function verifies(stored: string, password: string): boolean {
  return scramSha256Verifier(password, parseScramVerifier(stored)) === stored;
}

describe("SCRAM-SHA-256 verifier", () => {
  it("is exactly what PostgreSQL stores for the same password, salt and iterations", async () => {
    await db.withClient(async (client) => {
      await client.query("SET password_encryption = 'scram-sha-256'");
      for (const password of ["s3cret", "A-long_password.with~every/URL+safe=char", "päss wörd", "x"]) {
        const role = loginName("pgref");
        await client.query(`CREATE ROLE ${role} PASSWORD ${pg.escapeLiteral(password)}`);
        const stored = await storedVerifier(client, role);
        expect(stored).toMatch(/^SCRAM-SHA-256\$/);
        expect(scramSha256Verifier(password, parseScramVerifier(stored))).toBe(stored);
        expect(verifies(stored, `${password}!`)).toBe(false);
      }
    });
  });

  it("uses a fresh salt each time and refuses empty input", () => {
    expect(scramSha256Verifier("p")).not.toBe(scramSha256Verifier("p"));
    expect(() => scramSha256Verifier("")).toThrow(RangeError);
    expect(() => scramSha256Verifier("p", { iterations: 0 })).toThrow(RangeError);
    expect(() => parseScramVerifier("md5abc")).toThrow(/SCRAM/);
  });
});

describe("core.provision_login", () => {
  it("creates a login with exactly its role, which then connects with its password", async () => {
    const username = loginName("consumer");
    const password = randomBytes(18).toString("base64url");
    await db.withClient(async (client) => {
      expect(await provisionLogin(client, { username, password, memberOf: "jobfence_consumer" })).toBe(
        "created",
      );
      const { rows } = await client.query(
        "SELECT rolcanlogin, rolsuper, rolcreatedb, rolcreaterole, rolreplication, rolbypassrls FROM pg_roles WHERE rolname = $1",
        [username],
      );
      expect(rows).toEqual([
        {
          rolcanlogin: true,
          rolsuper: false,
          rolcreatedb: false,
          rolcreaterole: false,
          rolreplication: false,
          rolbypassrls: false,
        },
      ]);
      expect(await memberships(client, username)).toEqual(["jobfence_consumer"]);
      expect(verifies(await storedVerifier(client, username), password)).toBe(true);
    });
    const url = new URL(db.url);
    url.username = username;
    url.password = password;
    const login = new pg.Client({ connectionString: url.toString() });
    await login.connect();
    try {
      const { rows } = await login.query<{ user: string; consumer: boolean; ops: boolean }>(
        `SELECT current_user AS user, pg_has_role('jobfence_consumer', 'USAGE') AS consumer,
                pg_has_role('jobfence_ops', 'USAGE') AS ops`,
      );
      expect(rows).toEqual([{ user: username, consumer: true, ops: false }]);
      // The consumer's privileges, and no more: it may read fences but not resolve dead letters.
      await login.query("SELECT count(*) FROM core.processed_jobs");
      await expectRefused(
        login.query("UPDATE core.dead_letters SET status = 'discarded'"),
        SQLSTATE.insufficientPrivilege,
      );
    } finally {
      await login.end();
    }
  });

  it("updates the password of an existing login and moves it to its new role only", async () => {
    const username = loginName("moved");
    await db.withClient(async (client) => {
      await provisionLogin(client, { username, password: "first-password", memberOf: "jobfence_consumer" });
      expect(
        await provisionLogin(client, { username, password: "second-password", memberOf: "jobfence_ops" }),
      ).toBe("updated");
      const stored = await storedVerifier(client, username);
      expect(verifies(stored, "second-password")).toBe(true);
      expect(verifies(stored, "first-password")).toBe(false);
      expect(await memberships(client, username)).toEqual(["jobfence_ops"]);
    });
  });

  it("refuses a role that is not a jobfence group role, reserved names, and plaintext passwords", async () => {
    const verifier = scramSha256Verifier("pw");
    await db.withClient(async (client) => {
      const call = (login: string, password: string, memberOf: string) =>
        client.query("SELECT core.provision_login($1, $2, $3)", [login, password, memberOf]);
      const username = loginName("refused");
      await expectRefused(call(username, verifier, "pg_read_all_data"), INVALID_PARAMETER);
      await expectRefused(call(username, verifier, "jobfence_migrator"), INVALID_PARAMETER);
      for (const reserved of [...GROUP_ROLES, "pg_monitor", "rds_superuser", "rdsadmin"]) {
        await expectRefused(call(reserved, verifier, "jobfence_ops"), INVALID_PARAMETER);
      }
      const { rows } = await client.query<{ me: string }>("SELECT current_user AS me");
      await expectRefused(call(rows[0]?.me ?? "", verifier, "jobfence_ops"), INVALID_PARAMETER);
      await expectRefused(call(username, "plaintext-password", "jobfence_ops"), INVALID_PARAMETER);
      const exists = await client.query("SELECT 1 FROM pg_roles WHERE rolname = $1", [username]);
      expect(exists.rowCount).toBe(0);
    });
  });

  it("refuses to take over an existing role with more privileges than a login", async () => {
    const username = loginName("powerful");
    await db.withClient(async (client) => {
      await client.query(`CREATE ROLE ${username} LOGIN CREATEDB`);
      await expectRefused(
        provisionLogin(client, { username, password: "pw", memberOf: "jobfence_consumer" }),
        SQLSTATE.insufficientPrivilege,
      );
      expect(await memberships(client, username)).toEqual([]);
    });
  });

  it("may be called by the migrator only", async () => {
    await db.withClient(async (client) => {
      for (const role of GROUP_ROLES) {
        await client.query(`SET ROLE ${role}`);
        await expectRefused(
          client.query("SELECT core.provision_login($1, $2, 'jobfence_ops')", [
            loginName("escalate"),
            scramSha256Verifier("pw"),
          ]),
          SQLSTATE.insufficientPrivilege,
        );
        await client.query("RESET ROLE");
      }
    });
  });
});

describe("provisionLogins", () => {
  it("changes no login when one of them is refused", async () => {
    const good = loginName("atomic");
    await db.withClient(async (client) => {
      await expectRefused(
        provisionLogins(client, [
          { username: good, password: "pw", memberOf: "jobfence_cleanup" },
          { username: "jobfence_ops", password: "pw", memberOf: "jobfence_ops" },
        ]),
        INVALID_PARAMETER,
      );
      const exists = await client.query("SELECT 1 FROM pg_roles WHERE rolname = $1", [good]);
      expect(exists.rowCount).toBe(0);
    });
  });

  it("refuses one user name for two kinds of function", async () => {
    const shared = loginName("shared");
    await db.withClient(async (client) => {
      await expect(
        provisionLogins(client, [
          { username: shared, password: "pw", memberOf: "jobfence_consumer" },
          { username: shared, password: "pw", memberOf: "jobfence_ops" },
        ]),
      ).rejects.toThrow(/appears twice/);
    });
  });
});
