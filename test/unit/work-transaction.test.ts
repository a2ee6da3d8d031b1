/**
 * The work's transaction guard (shared/fence/work-transaction.ts): which statements it refuses,
 * read the way PostgreSQL's scanner reads them, and a `tx` that refuses them without sending
 * anything. test/integration/work-transaction.test.ts runs it against a server.
 */
import fc from "fast-check";
import pg from "pg";
import { describe, expect, it } from "vitest";
import { TransactionControlError } from "../../shared/errors.ts";
import {
  guardTransaction,
  refusedStatement,
  TRANSACTION_ENDED,
} from "../../shared/fence/work-transaction.ts";

/** Statements the work may run (some fail on the server; none is refused here). */
const ALLOWED: readonly string[] = [
  // Temporary tables dropped at commit, cursors without hold, reading pg_settings.
  "CREATE TEMP TABLE scratch (id int) ON COMMIT DROP",
  "create temporary table scratch as select 1 with no data on commit drop",
  "DECLARE c CURSOR FOR SELECT 1",
  "DECLARE c CURSOR WITHOUT HOLD FOR SELECT 1",
  "SELECT setting FROM pg_settings WHERE name = 'work_mem'",
  "SELECT 'CREATE TEMP TABLE x' AS text",
  "",
  ";;",
  "  ;\n; ",
  "/* only a comment */",
  "SELECT 1 -- only a comment",
  "SELECT 1",
  "  \n\t\r\f\vSELECT 1  ",
  "(SELECT 1)",
  "((SELECT 1)) UNION (SELECT 2)",
  "INSERT INTO t VALUES (1) RETURNING *",
  "UPDATE t SET x = 1",
  "DELETE FROM t",
  "MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DO NOTHING",
  "WITH x AS (SELECT 1) SELECT * FROM x",
  "VALUES (1), (2)",
  "TABLE t",
  "COPY t FROM STDIN",
  "SAVEPOINT s",
  "RELEASE s",
  "RELEASE SAVEPOINT s",
  "ROLLBACK TO s",
  "ROLLBACK TO SAVEPOINT s",
  "rollback work to savepoint s",
  "ROLLBACK TRANSACTION TO s",
  "set local statement_timeout = '1s'",
  "SET LOCAL TIME ZONE 'UTC'",
  "SET /* transaction-scoped */ LOCAL x.y = 1",
  "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE",
  "SET CONSTRAINTS ALL DEFERRED",
  'SET CONSTRAINTS "c1", c2 IMMEDIATE',
  "SELECT set_config('a.b', 'c', true)",
  "SELECT set_config('a.b','c',TRUE)",
  "SELECT pg_catalog.set_config('a.b', 'c', /* local */ true)",
  "SELECT set_config ( 'a.b' , 'c' ,\n true )",
  "SELECT set_config('a.b', f(1, 2), true)",
  "SELECT set_config('a.b', (ARRAY[1, 2])[1]::text, true)",
  "SELECT set_config FROM t",
  "SELECT pg_advisory_xact_lock(1)",
  "SELECT pg_advisory_xact_lock_shared(1)",
  "SELECT pg_try_advisory_xact_lock(1, 2)",
  "SELECT pg_try_advisory_xact_lock_shared(1)",
  "SELECT 'pg_advisory_lock(1)', 'set_config(''a'', ''b'', false)'",
  "CALL p()",
  "DO $$ BEGIN PERFORM 1; END $$",
  "DO $body$ BEGIN COMMIT; END $body$",
  "NOTIFY channel, 'payload'",
  "LOCK TABLE t IN SHARE MODE",
  "DECLARE c CURSOR FOR SELECT 1",
  "FETCH c",
  "CLOSE c",
  "EXECUTE q",
  "EXPLAIN ANALYZE SELECT 1",
  "SELECT 1 AS commit, 2 AS begin",
  "SELECT begin, rollback FROM t",
  // Keywords inside strings, identifiers, comments and dollar quotes.
  "SELECT 'COMMIT'",
  "SELECT 'a;COMMIT'",
  "SELECT 'it''s; COMMIT'",
  "SELECT E'\\'; COMMIT; --'",
  "SELECT e'\\\\'' ; COMMIT ; '",
  "SELECT U&'\\0041; COMMIT'",
  "SELECT N'x; COMMIT', B'01; COMMIT', X'1F; COMMIT'",
  'SELECT "COMMIT" FROM t',
  'SELECT "a""; COMMIT" FROM t',
  'SELECT U&"d\\0061ta; COMMIT" FROM t',
  "SELECT 1 -- ; COMMIT",
  "SELECT 1 /* ; COMMIT */",
  "SELECT 1 /* a /* b */ ; COMMIT */",
  "/* /* */ COMMIT */ SELECT 1",
  "SELECT $$;COMMIT;$$",
  "SELECT $a$ $$; COMMIT; $$ $a$",
  "SELECT $a$ $b$; COMMIT; $b$ $a$",
  "SELECT $a$ $A$; COMMIT; $A$ $a$",
  "SELECT $_1$ ; COMMIT; $_1$",
  "SELECT $é$ ; COMMIT; $é$",
  // A string continued after a newline stays the same kind of string: E'…' still escapes.
  "SELECT 'a'\n'b; COMMIT'",
  "SELECT E'a' -- comment\n  '\\'; COMMIT; --'",
  // A quoted identifier is never a keyword; PostgreSQL rejects these, the guard need not.
  '"COMMIT"',
  '"SET" x = 1',
  // No-break space is not PostgreSQL whitespace: `\u00a0COMMIT` is one identifier, not COMMIT.
  "\u00a0COMMIT",
  "SELECT 1.5$$; COMMIT; $$",
  "CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; SELECT CASE WHEN true THEN 2 END; END",
  "CREATE OR REPLACE PROCEDURE p() LANGUAGE sql BEGIN ATOMIC END",
  "CREATE RULE r AS ON INSERT TO t DO ALSO (INSERT INTO a VALUES (1); NOTIFY x)",
];

/** Refused texts, each with the statement the refusal names. */
const REFUSED: ReadonlyArray<readonly [sql: string, statement: string]> = [
  // What decides which table a name means, even for the transaction only (batch-mates share it;
  // pg_temp first makes a plain CREATE TABLE temporary), and set_config of a name it cannot read.
  ["SET LOCAL search_path = pg_temp, public", "SET LOCAL search_path = pg_temp, public"],
  ["set local search_path to other, public", "set local search_path to other, public"],
  ["SET LOCAL ROLE someone", "SET LOCAL ROLE someone"],
  ["SET LOCAL search_path = app", "SET LOCAL search_path = app"],
  ["SET LOCAL SESSION AUTHORIZATION DEFAULT", "SET LOCAL SESSION AUTHORIZATION DEFAULT"],
  ["SET LOCAL SESSION AUTHORIZATION someone", "SET LOCAL SESSION AUTHORIZATION someone"],
  [
    "SELECT set_config('search_path', 'pg_temp, public', true)",
    "SELECT set_config('search_path', 'pg_temp, public', true)",
  ],
  [
    "SELECT set_config('standard_' || 'conforming_strings', 'off', true)",
    "SELECT set_config('standard_' || 'conforming_strings', 'off', true)",
  ],
  ["SELECT set_config($1, 'x', true)", "SELECT set_config($1, 'x', true)"],
  ["SELECT 1 AS x INTO LOCAL TEMP ledger", "SELECT 1 AS x INTO LOCAL TEMP ledger"],
  ["SELECT 1 AS x INTO GLOBAL TEMPORARY TABLE ledger", "SELECT 1 AS x INTO GLOBAL TEMPORARY TABLE ledger"],
  // Session-scoped objects: they outlive the transaction on the pooled connection.
  ["CREATE TEMP TABLE effects (id int)", "CREATE TEMP TABLE effects (id int)"],
  ["create temporary table t as select 1", "create temporary table t as select 1"],
  [
    "CREATE GLOBAL TEMPORARY TABLE t (x int) ON COMMIT PRESERVE ROWS",
    "CREATE GLOBAL TEMPORARY TABLE t (x int) ON COMMIT PRESERVE ROWS",
  ],
  ["CREATE TABLE pg_temp.t (x int)", "CREATE TABLE pg_temp.t (x int)"],
  ['CREATE VIEW "pg_temp".v AS SELECT 1', 'CREATE VIEW "pg_temp".v AS SELECT 1'],
  ["CREATE TEMP SEQUENCE s", "CREATE TEMP SEQUENCE s"],
  [
    "CREATE FUNCTION pg_temp.f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
    "CREATE FUNCTION pg_temp.f() RETURNS int LANGUAGE sql AS 'SELECT 1'",
  ],
  ["SELECT 1 AS x INTO TEMP t", "SELECT 1 AS x INTO TEMP t"],
  ["select * into temporary table t from s", "select * into temporary table t from s"],
  ["DECLARE c CURSOR WITH HOLD FOR SELECT 1", "DECLARE c CURSOR WITH HOLD FOR SELECT 1"],
  ["declare c no scroll cursor with hold for select 1", "declare c no scroll cursor with hold for select 1"],
  [
    "UPDATE pg_settings SET setting = 'off' WHERE name = 'standard_conforming_strings'",
    "UPDATE pg_settings SET setting = 'off' WHERE name = 'standard_conforming_strings'",
  ],
  [
    "update pg_catalog.pg_settings set setting = '1' where name = 'x'",
    "update pg_catalog.pg_settings set setting = '1' where name = 'x'",
  ],
  [
    "WITH s AS (UPDATE pg_settings SET setting = 'x' WHERE name = 'y' RETURNING 1) SELECT * FROM s",
    "WITH s AS (UPDATE pg_settings SET setting = 'x' WHERE name = 'y' RETURNING 1) SELECT * FROM s",
  ],
  ["BEGIN", "BEGIN"],
  ["begin transaction isolation level serializable", "begin transaction isolation level serializable"],
  ["START TRANSACTION", "START TRANSACTION"],
  ["COMMIT", "COMMIT"],
  ["commit work", "commit work"],
  ["COMMIT AND CHAIN", "COMMIT AND CHAIN"],
  ["commit/**/and chain", "commit/**/and chain"],
  ["END", "END"],
  ["end transaction", "end transaction"],
  ["ROLLBACK", "ROLLBACK"],
  ["ROLLBACK WORK", "ROLLBACK WORK"],
  ["ROLLBACK AND NO CHAIN", "ROLLBACK AND NO CHAIN"],
  ["ABORT", "ABORT"],
  ["ABORT TO s", "ABORT TO s"],
  ["PREPARE TRANSACTION 'gid'", "PREPARE TRANSACTION 'gid'"],
  ["COMMIT PREPARED 'gid'", "COMMIT PREPARED 'gid'"],
  ["ROLLBACK PREPARED 'gid'", "ROLLBACK PREPARED 'gid'"],
  // Hostile spellings.
  ["CoMmIt", "CoMmIt"],
  ["  \n\t\r\f\vcommit  \n", "commit"],
  ["/* x */ COMMIT", "/* x */ COMMIT"],
  ["--x\nCOMMIT", "--x\nCOMMIT"],
  ["--x\rCOMMIT", "--x\rCOMMIT"],
  ["/* a /* b */ still comment */ COMMIT", "/* a /* b */ still comment */ COMMIT"],
  ["SELECT 1 /* /* */ */; COMMIT", "COMMIT"],
  ["/**/COMMIT", "/**/COMMIT"],
  ["(COMMIT)", "(COMMIT)"],
  ["SELECT ';'; COMMIT", "COMMIT"],
  ["SELECT 1;COMMIT;SELECT 2", "COMMIT"],
  ["SELECT 'it''s'; COMMIT", "COMMIT"],
  ["SELECT $$;$$; COMMIT", "COMMIT"],
  ["SELECT $a$ $$ $a$; COMMIT", "COMMIT"],
  ["SELECT $a$ x $a$a$; COMMIT; $a$", "COMMIT"],
  ["SELECT E'\\''; COMMIT", "COMMIT"],
  ["SELECT E'\\\\'; COMMIT", "COMMIT"],
  // Without E, a backslash is an ordinary character (standard_conforming_strings is on).
  ["SELECT 'a\\'; COMMIT; --'", "COMMIT"],
  // E only prefixes a string as a token of its own: `xe'…'` is the identifier xe, then '…'.
  ["SELECT xe'\\'; COMMIT; --'", "COMMIT"],
  ["SELECT 'a' 'b'; COMMIT", "COMMIT"],
  ["SELECT E'a'\n'b'; COMMIT", "COMMIT"],
  ["SELECT E'a' /* no continuation */\n'\\'; COMMIT; --'", "COMMIT"],
  // `$` goes on an identifier: `x$$` is one identifier, not x and a dollar quote.
  ["SELECT x$$; COMMIT; $$", "COMMIT"],
  ["SELECT $1; COMMIT", "COMMIT"],
  ["SELECT $1$$x$$; COMMIT", "COMMIT"],
  ['SELECT 1 AS "x"; COMMIT', "COMMIT"],
  ['SELECT "a""b"; COMMIT', "COMMIT"],
  ["SELECT 1 -- c\n; COMMIT", "COMMIT"],
  ["SELECT 1; END", "END"],
  ["CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; END; COMMIT", "COMMIT"],
  ["CREATE FUNCTION f(begin atomic) RETURNS int LANGUAGE sql AS 'select 1'; END", "END"],
  [
    "CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC COMMIT; END",
    "CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC COMMIT",
  ],
  ["SELECT 1\u0000; SELECT 2", "SELECT 1\u0000; SELECT 2"],
  // Session state.
  ["SET search_path = app", "SET search_path = app"],
  ["set statement_timeout to 0", "set statement_timeout to 0"],
  ["SET ROLE jobfence_worker", "SET ROLE jobfence_worker"],
  ["SET TIME ZONE 'UTC'", "SET TIME ZONE 'UTC'"],
  ["SET SESSION x.y = 1", "SET SESSION x.y = 1"],
  ["SET SESSION AUTHORIZATION DEFAULT", "SET SESSION AUTHORIZATION DEFAULT"],
  [
    "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY",
    "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY",
  ],
  ['SET "local" TO 1', 'SET "local" TO 1'],
  ["SET local.x = 1", "SET local.x = 1"],
  ["SET transaction.x = 1", "SET transaction.x = 1"],
  ["SET constraints TO 1", "SET constraints TO 1"],
  ["SET LOCAL standard_conforming_strings = off", "SET LOCAL standard_conforming_strings = off"],
  ['SET LOCAL "Standard_Conforming_Strings" TO off', 'SET LOCAL "Standard_Conforming_Strings" TO off'],
  ["SET LOCAL client_encoding = 'SJIS'", "SET LOCAL client_encoding = 'SJIS'"],
  ["SET LOCAL NAMES 'SJIS'", "SET LOCAL NAMES 'SJIS'"],
  ["RESET ALL", "RESET ALL"],
  ["RESET search_path", "RESET search_path"],
  ["DISCARD ALL", "DISCARD ALL"],
  ["DISCARD PLANS", "DISCARD PLANS"],
  ["LISTEN channel", "LISTEN channel"],
  ["UNLISTEN *", "UNLISTEN *"],
  ["PREPARE q AS SELECT 1", "PREPARE q AS SELECT 1"],
  ["PREPARE q (int) AS SELECT $1", "PREPARE q (int) AS SELECT $1"],
  ["DEALLOCATE q", "DEALLOCATE q"],
  ["DEALLOCATE ALL", "DEALLOCATE ALL"],
  ["LOAD 'auto_explain'", "LOAD 'auto_explain'"],
  // set_config for the session, anywhere in a statement.
  ["SELECT set_config('a.b', 'c', false)", "SELECT set_config('a.b', 'c', false)"],
  ["SELECT set_config('a.b','c',$3)", "SELECT set_config('a.b','c',$3)"],
  ["SELECT set_config('a.b', 'c', 'true')", "SELECT set_config('a.b', 'c', 'true')"],
  ["SELECT set_config('a.b', 'c', true AND false)", "SELECT set_config('a.b', 'c', true AND false)"],
  ["SELECT set_config('a.b', 'c', (true))", "SELECT set_config('a.b', 'c', (true))"],
  ["SELECT set_config('a.b', 'c')", "SELECT set_config('a.b', 'c')"],
  ["SELECT set_config('a.b', 'c', true", "SELECT set_config('a.b', 'c', true"],
  ["SELECT SET_CONFIG('a.b', 'c', false)", "SELECT SET_CONFIG('a.b', 'c', false)"],
  ["SELECT pg_catalog.set_config('a.b', 'c', false)", "SELECT pg_catalog.set_config('a.b', 'c', false)"],
  ["SELECT \"set_config\"('a.b', 'c', false)", "SELECT \"set_config\"('a.b', 'c', false)"],
  [
    "SELECT \"pg_catalog\" . \"set_config\" /* x */ ('a.b', 'c', false)",
    "SELECT \"pg_catalog\" . \"set_config\" /* x */ ('a.b', 'c', false)",
  ],
  ["SELECT U&\"set\\005fconfig\"('a.b', 'c', false)", "SELECT U&\"set\\005fconfig\"('a.b', 'c', false)"],
  [
    "SELECT U&\"set!005fconfig\" UESCAPE '!' ('a.b', 'c', false)",
    "SELECT U&\"set!005fconfig\" UESCAPE '!' ('a.b', 'c', false)",
  ],
  [
    "SELECT x FROM t WHERE set_config('a.b', 'c', false) IS NOT NULL",
    "SELECT x FROM t WHERE set_config('a.b', 'c', false) IS NOT NULL",
  ],
  [
    "SELECT set_config('a.b', set_config('c.d', 'e', false), true)",
    "SELECT set_config('a.b', set_config('c.d', 'e', false), true)",
  ],
  [
    "SELECT set_config('standard_conforming_strings', 'off', true)",
    "SELECT set_config('standard_conforming_strings', 'off', true)",
  ],
  [
    "SELECT set_config(E'Client\\x5fencoding', 'SJIS', true)",
    "SELECT set_config(E'Client\\x5fencoding', 'SJIS', true)",
  ],
  [
    "SELECT set_config(U&'client\\005fencoding', 'SJIS', true)",
    "SELECT set_config(U&'client\\005fencoding', 'SJIS', true)",
  ],
  // Session-level advisory locks.
  // The fence's own protocol: a work that withdrew its fence would commit its effect without one.
  [
    "SELECT core.withdraw_own_fences('award-points', ARRAY['j-1'])",
    "SELECT core.withdraw_own_fences('award-points', ARRAY['j-1'])",
  ],
  ['select "core"."withdraw_own_fences"($1, $2)', 'select "core"."withdraw_own_fences"($1, $2)'],
  ["SELECT core.assert_fence_transaction('1'::xid8)", "SELECT core.assert_fence_transaction('1'::xid8)"],
  ["SELECT pg_advisory_lock(1)", "SELECT pg_advisory_lock(1)"],
  ["SELECT pg_advisory_lock_shared(1, 2)", "SELECT pg_advisory_lock_shared(1, 2)"],
  ["SELECT pg_try_advisory_lock(1)", "SELECT pg_try_advisory_lock(1)"],
  ["SELECT pg_try_advisory_lock_shared(1)", "SELECT pg_try_advisory_lock_shared(1)"],
  ["SELECT pg_catalog.pg_advisory_lock(1)", "SELECT pg_catalog.pg_advisory_lock(1)"],
  ['SELECT "pg_advisory_lock"(1)', 'SELECT "pg_advisory_lock"(1)'],
  ["SELECT PG_ADVISORY_LOCK /**/ (1)", "SELECT PG_ADVISORY_LOCK /**/ (1)"],
  ["SELECT 1; SELECT pg_advisory_lock(1); COMMIT", "SELECT pg_advisory_lock(1)"],
];

describe("refusedStatement", () => {
  it.each(ALLOWED.map((sql) => [sql]))("allows %j", (sql) => {
    expect(refusedStatement(sql)).toBeUndefined();
  });

  it.each(REFUSED)("refuses %j", (sql, statement) => {
    expect(refusedStatement(sql)).toEqual({ statement, why: expect.any(String) });
  });

  it("says why", () => {
    expect(refusedStatement("COMMIT")?.why).toMatch(/commit the fence's transaction/);
    expect(refusedStatement("ROLLBACK")?.why).toMatch(/ROLLBACK TO SAVEPOINT/);
    expect(refusedStatement("SET search_path = x")?.why).toMatch(/SET LOCAL/);
    expect(refusedStatement("SELECT pg_try_advisory_lock(1)")?.why).toMatch(/use pg_try_advisory_xact_lock$/);
    expect(refusedStatement("SELECT set_config('a.b', 'c', false)")?.why).toMatch(/third argument/);
    expect(refusedStatement("PREPARE TRANSACTION 'x'")?.why).toMatch(/two-phase/);
    expect(refusedStatement("PREPARE q AS SELECT 1")?.why).toMatch(/prepared statement/);
  });

  /** Allowed statements after which a `;` starts a statement of its own (no trailing `--`). */
  const complete = ALLOWED.filter((sql) => !/--[^\n\r]*$/.test(sql));
  const gap = fc.constantFrom(" ", "", "\n", "\t\v\f", "/* c */", "/* a /* b */ c */", "--c\n");

  it("property: allowed statements followed by ; COMMIT are refused, at the COMMIT", () => {
    fc.assert(
      fc.property(
        fc.array(fc.oneof(fc.constantFrom(...complete), wrapped()), { maxLength: 6 }),
        gap,
        (list, ws) => {
          expect(refusedStatement(list.join(";\n"))).toBeUndefined();
          expect(refusedStatement(`${list.join(";\n")};${ws}COMMIT`)).toEqual({
            statement: `${ws}COMMIT`.trim(),
            why: expect.any(String),
          });
        },
      ),
      { numRuns: 500 },
    );
  });

  it("property: any statement inside a string, identifier, comment or dollar quote is allowed", () => {
    fc.assert(
      fc.property(wrapped(), (sql) => {
        expect(refusedStatement(sql)).toBeUndefined();
      }),
      { numRuns: 2000 },
    );
  });

  it("property: any text scans without throwing, and a refusal names a piece of it", () => {
    fc.assert(
      fc.property(fc.oneof(fc.string({ unit: "binary" }), sqlish()), (sql) => {
        const refused = refusedStatement(sql);
        if (refused) expect(sql).toContain(refused.statement);
      }),
      { numRuns: 3000 },
    );
  });
});

/** Any statement: allowed, refused, or random text (no U+0000, which is refused everywhere). */
function anyStatement(): fc.Arbitrary<string> {
  return fc
    .oneof(
      fc.constantFrom(...ALLOWED, ...REFUSED.map(([sql]) => sql)),
      fc.string({ unit: "binary" }),
      sqlish(),
    )
    .map((s) => s.replaceAll("\u0000", ""));
}

/** Text built from the pieces the scanner cares about, to reach its corners. */
function sqlish(): fc.Arbitrary<string> {
  const pieces = [
    "'",
    "''",
    '"',
    "E'",
    "e'",
    "U&'",
    'U&"',
    "N'",
    "$$",
    "$a$",
    "$1",
    "$",
    "--",
    "/*",
    "*/",
    "\\",
    ";",
    "\n",
    "\r",
    " ",
    "\v",
    "x",
    "1",
    ".",
    "(",
    ")",
    ",",
    "COMMIT",
    "SET",
    "LOCAL",
    "set_config(",
    "true",
    "false",
    "ROLLBACK",
    "TO",
    "BEGIN",
    "ATOMIC",
    "END",
    "CREATE FUNCTION",
    "UESCAPE",
    "pg_advisory_lock(",
  ];
  return fc.array(fc.constantFrom(...pieces), { maxLength: 24 }).map((p) => p.join(""));
}

/** A statement that holds any statement where PostgreSQL reads no SQL: so it must be allowed. */
function wrapped(): fc.Arbitrary<string> {
  return fc.tuple(anyStatement(), fc.nat(6)).map(([s, how]) => {
    switch (how) {
      case 0:
        return `SELECT ${pg.escapeLiteral(s)}`; // '…' doubled, or E'…' when it holds a backslash
      case 1:
        return `SELECT '${s.replaceAll("'", "''")}'`;
      case 2:
        return `SELECT E'${s.replaceAll("\\", "\\\\").replaceAll("'", "\\'")}'`;
      case 3: {
        let tag = "q";
        while (s.includes(`$${tag}$`)) tag += "q";
        return `DO $${tag}$${s}$${tag}$`;
      }
      case 4:
        return `SELECT 1 AS ${pg.escapeIdentifier(s)}`;
      case 5:
        // Keep the comment closed: split every /* and */ the text holds.
        return `SELECT 1 /* ${s.replace(/\/(?=\*)|\*(?=\/)/g, "$& ")} */`;
      default:
        return `SELECT 1 -- ${s.replace(/[\n\r]/g, " ")}\n`;
    }
  });
}

/** A stand-in client that records the calls it receives, and on which `this`. */
class FakeClient {
  readonly calls: unknown[][] = [];
  query(...args: unknown[]): unknown {
    if (!(this instanceof FakeClient)) throw new Error("query called without its client");
    this.calls.push(args);
    const [config] = args;
    // pg returns a Submittable itself, and a promise for everything else.
    if (typeof (config as { submit?: unknown } | undefined)?.submit === "function") return config;
    return Promise.resolve({ rows: [{ ok: true }] });
  }
  release(): void {}
}

function guarded() {
  const client = new FakeClient();
  return { client, ...guardTransaction(client as unknown as pg.ClientBase) };
}

describe("guardTransaction", () => {
  it("passes allowed statements to the client, every form, on the client", async () => {
    const { client, tx } = guarded();
    await expect(tx.query("SELECT 1")).resolves.toEqual({ rows: [{ ok: true }] });
    await tx.query("SELECT $1::int", [1]);
    await tx.query({ text: "SELECT $1::int", values: [2] });
    await tx.query({ text: "SELECT 1", rowMode: "array" });
    expect(client.calls).toEqual([
      ["SELECT 1"],
      ["SELECT $1::int", [1]],
      [{ text: "SELECT $1::int", values: [2] }],
      [{ text: "SELECT 1", rowMode: "array" }],
    ]);
  });

  it("refuses without sending anything, as a rejected promise", async () => {
    const { client, tx } = guarded();
    const refused = tx.query("INSERT INTO t VALUES (1); COMMIT");
    await expect(refused).rejects.toBeInstanceOf(TransactionControlError);
    await expect(refused).rejects.toMatchObject({ statement: "COMMIT" });
    await expect(tx.query({ text: "SET search_path = x" })).rejects.toThrow(/SET LOCAL/);
    await expect(tx.query("SELECT set_config($1, $2, false)", ["a.b", "c"])).rejects.toBeInstanceOf(
      TransactionControlError,
    );
    expect(client.calls).toEqual([]);
  });

  it("checks a Submittable's text, and throws its refusal (there is no promise to reject)", () => {
    const { client, tx } = guarded();
    const allowed = new pg.Query("SELECT 1");
    expect(tx.query(allowed)).toBe(allowed);
    expect(() => tx.query(new pg.Query("COMMIT"))).toThrow(TransactionControlError);
    expect(client.calls).toEqual([[allowed]]);
  });

  it("refuses the callback forms, text it cannot read, and a named query with no text", async () => {
    const { client, tx } = guarded();
    const callback = () => {};
    expect(() => tx.query("SELECT 1", callback)).toThrow(TypeError);
    expect(() => tx.query("SELECT 1", [], callback)).toThrow(/no callbacks/);
    expect(() => tx.query({ text: "SELECT 1", callback } as pg.QueryConfig)).toThrow(TypeError);
    await expect(tx.query({ text: undefined } as unknown as pg.QueryConfig)).rejects.toThrow(TypeError);
    await expect(tx.query(null as unknown as string)).rejects.toThrow(TypeError);
    await expect(tx.query({ name: "harness_statement", text: "" })).rejects.toBeInstanceOf(
      TransactionControlError,
    );
    expect(client.calls).toEqual([]);
  });

  it("refuses every call once closed", async () => {
    const { client, tx, close } = guarded();
    await tx.query("SELECT 1");
    close();
    close();
    await expect(tx.query("SELECT 1")).rejects.toMatchObject({
      name: "TransactionControlError",
      statement: "SELECT 1",
      message: expect.stringContaining(TRANSACTION_ENDED),
    });
    expect(() => tx.query(new pg.Query("SELECT 1"))).toThrow(TransactionControlError);
    expect(() => tx.query("SELECT 1", () => {})).toThrow(TransactionControlError);
    expect(client.calls).toHaveLength(1);
  });

  it("exposes only query: a fresh frozen object, not the client", () => {
    const { client, tx } = guarded();
    expect(Object.keys(tx)).toEqual(["query"]);
    expect(tx).not.toBe(client);
    expect("release" in tx).toBe(false);
    expect("connection" in tx).toBe(false);
    expect(Object.isFrozen(tx)).toBe(true);
    // A detached query still runs on the client.
    const { query } = tx;
    return expect(query("SELECT 1")).resolves.toBeDefined();
  });
});
