/**
 * The guard between a consumer's work and the fence's transaction. The work runs inside the
 * harness's transaction (BEGIN; fence insert; work; COMMIT), on a pooled connection. Given the raw
 * client, the work could COMMIT the fence with half its effect, or run a session-level SET, LISTEN
 * or PREPARE whose effect outlives the transaction and reaches the next job that borrows the
 * connection. The work gets a `tx` that only runs statements, and refuses those before they reach
 * the server (a refused statement costs no round trip and leaves the transaction as it was).
 *
 * The check is lexical: the text is split into statements the way PostgreSQL's scanner splits it
 * (strings, quoted identifiers, nested comments, dollar quotes), and each statement's leading
 * keywords and function calls are compared with a list. It reads the text as the server does with
 * `standard_conforming_strings` on and UTF-8 client encoding, and refuses SET LOCAL of either
 * setting, which would make it misread later statements. It does not see into dollar-quoted
 * bodies (DO blocks, function definitions) or into functions the work calls; PostgreSQL itself
 * refuses COMMIT and ROLLBACK there while a transaction block is open. It guards against the
 * work's mistakes, not against hostile code, which runs in the same process and could open a
 * connection of its own.
 */
import type pg from "pg";
import { TransactionControlError } from "../errors.ts";
import type { FollowUpSchemas, SendFollowUp } from "../outbox/follow-up.ts";

/** The fence transaction's `query`, and nothing else of the client. */
export type WorkQueries = Pick<pg.ClientBase, "query">;

/**
 * What the work gets: the fence transaction's `query`, and `send` for the follow-ups its consumer
 * declares (`sends`): each is written to the outbox in this transaction and sent once it commits
 * (shared/outbox/). Returns the follow-up's job id.
 */
export type Transaction<F extends FollowUpSchemas = Record<never, never>> = WorkQueries & {
  readonly send: SendFollowUp<F>;
};

/** A statement `refusedStatement` refuses and why, in a few words. */
export interface Refusal {
  readonly statement: string;
  readonly why: string;
}

/** Why a call on a closed guard is refused. */
export const TRANSACTION_ENDED =
  "the work's transaction has already ended: the work kept using it after its promise settled";

/**
 * Splits `sql` into statements as PostgreSQL does and returns the first one the work may not run
 * inside the fence's transaction, or undefined when every statement is allowed.
 */
export function refusedStatement(sql: string): Refusal | undefined {
  // The protocol carries statements as C strings: the server would see only the text before it.
  if (sql.includes("\u0000")) return { statement: trim(sql), why: WHY.nul };
  let inAtomicBody = false;
  for (const { text, tokens } of scan(sql)) {
    let why: string | undefined;
    if (inAtomicBody && keyword(tokens, 0) === "end") {
      // The END that closes a BEGIN ATOMIC body, not a COMMIT: a body statement cannot begin with END.
      inAtomicBody = false;
      why = callRefusal(tokens);
    } else {
      why = statementRefusal(tokens) ?? callRefusal(tokens);
      const body = inAtomicBody ? undefined : atomicBodyStart(tokens);
      if (why === undefined && body !== undefined) {
        const first = tokens.slice(body);
        if (keyword(first, 0) === "end") continue;
        inAtomicBody = true;
        why = statementRefusal(first);
      }
    }
    if (why !== undefined) return { statement: text, why };
  }
  return undefined;
}

/**
 * Wraps `client` for the work: `tx.query` takes what `client.query` takes (text and values, a
 * QueryConfig, a Submittable such as a pg-cursor) but refuses, without sending anything, every
 * statement {@link refusedStatement} refuses, with a TransactionControlError: as a rejected
 * promise, or thrown for a Submittable (whose call returns the Submittable, not a promise). The
 * callback forms are not supported (the work awaits its statements) and throw a TypeError.
 * `close()` ends the guard: every later call is refused.
 */
export function guardTransaction(client: pg.ClientBase): {
  readonly tx: WorkQueries;
  close(): void;
  /** Statements the work sent that have not been answered yet. */
  pending(): number;
} {
  let open = true;
  let pending = 0;
  const settled = () => {
    pending -= 1;
  };
  const query = (...args: unknown[]): unknown => {
    const [config, values, callback] = args;
    const submittable = isSubmittable(config);
    const text = typeof config === "string" ? config : isObject(config) ? config.text : undefined;
    const callbackForm =
      typeof values === "function" ||
      typeof callback === "function" ||
      (isObject(config) && !submittable && typeof config.callback === "function");
    const refusal = refuse(open, text, isObject(config) ? config.name : undefined, callbackForm);
    if (refusal === undefined) {
      const sent: unknown = Reflect.apply(client.query, client, args);
      // Counted so that a work returning with a statement still running is known for what it is.
      if (sent instanceof Promise) {
        pending += 1;
        sent.then(settled, settled);
      }
      return sent;
    }
    // Neither form has a promise to reject: the caller would get its Submittable back, or nothing.
    if (submittable || callbackForm) throw refusal;
    return Promise.reject(refusal);
  };
  const tx = Object.freeze({ query }) as unknown as WorkQueries;
  return {
    tx,
    close() {
      open = false;
    },
    pending: () => pending,
  };
}

/** The error refusing a call, or undefined when it may go to the server. */
function refuse(open: boolean, text: unknown, name: unknown, callbackForm: boolean): Error | undefined {
  if (!open) return new TransactionControlError(typeof text === "string" ? text : "", TRANSACTION_ENDED);
  if (callbackForm) {
    return new TypeError("the work's transaction takes no callbacks: await the promise tx.query returns");
  }
  if (typeof text !== "string") {
    return new TypeError(
      "the work's transaction runs only SQL text it can check: a string, or a .text string",
    );
  }
  // pg runs a named query that has no text as whatever the session prepared under that name.
  if (text === "" && typeof name === "string" && name !== "") {
    return new TransactionControlError(
      text,
      `a named query with no text would run ${JSON.stringify(name)} unchecked`,
    );
  }
  const refused = checkedStatement(text);
  return refused && new TransactionControlError(refused.statement, refused.why);
}

/**
 * Texts already checked, and their answer. A consumer sends the same few statements for every job
 * and the answer depends on the text alone, so each is lexed once per container rather than once
 * per job; texts of any length are kept up to a bound, the oldest forgotten first. A cache of a
 * pure function's answers, not state of any request.
 */
const CHECKED = new Map<string, Refusal | undefined>();
const CHECKED_MAX = 512;
const CHECKED_MAX_TEXT = 8192;

function checkedStatement(text: string): Refusal | undefined {
  if (CHECKED.has(text)) return CHECKED.get(text);
  const answer = refusedStatement(text);
  if (text.length <= CHECKED_MAX_TEXT) {
    if (CHECKED.size >= CHECKED_MAX) CHECKED.delete(CHECKED.keys().next().value as string);
    CHECKED.set(text, answer);
  }
  return answer;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null;
}

function isSubmittable(value: unknown): boolean {
  return isObject(value) && typeof value.submit === "function";
}

const WHY = {
  nul: "it contains U+0000, which PostgreSQL's protocol cannot carry in a statement",
  open: "the work already runs inside the fence's transaction, which the harness opened",
  commit:
    "it would commit the fence's transaction before the work is done; the harness commits when the work returns",
  rollback:
    "it would end the fence's transaction; throw to roll back, or use SAVEPOINT and ROLLBACK TO SAVEPOINT",
  twoPhase: "two-phase commit would take the fence's transaction out of the harness's hands",
  set: "a session-level SET outlives the transaction on the pooled connection; use SET LOCAL",
  reset: "RESET changes the session, past the transaction, on the pooled connection",
  discard: "DISCARD drops session state the pooled connection relies on (pg's prepared statements among it)",
  listen: "it changes the pooled session's notification subscriptions, which outlive the transaction",
  prepare: "a prepared statement belongs to the session and outlives the transaction",
  deallocate: "prepared statements belong to the session, pg's own named statements among them",
  load: "LOAD loads a library into the session, past the transaction",
  lexer:
    "the guard reads SQL with standard_conforming_strings on and UTF-8 client encoding; changing either would let it misread later statements",
  setConfig:
    "set_config without the literal true as its third argument changes the session, not just the transaction",
  temp: "a temporary object outlives the transaction on the pooled connection (the next job would see it); add ON COMMIT DROP",
  hold: "a cursor WITH HOLD outlives the transaction on the pooled connection",
  settings: "UPDATE pg_settings is a session-level SET that outlives the transaction; use SET LOCAL",
  scope:
    "search_path, role and session_authorization decide which tables a statement reaches and with whose rights; batch-mates share the transaction: qualify names instead",
  setConfigName:
    "set_config with a setting name that is not a literal could change any setting, the guard cannot tell which",
} as const;

/** Session-level advisory lock functions, and the transaction-level one to use instead. */
/**
 * Functions of the fence's own protocol the consumer role may execute: withdrawing the calling
 * transaction's fences (batch mode's cut) and the COMMIT's check. Called by the work, the first
 * would commit an effect without its fence, which a redelivery would then apply again.
 */
const HARNESS_FUNCTIONS: ReadonlySet<string> = new Set(["withdraw_own_fences", "assert_fence_transaction"]);

const SESSION_LOCKS: ReadonlyMap<string, string> = new Map([
  ["pg_advisory_lock", "pg_advisory_xact_lock"],
  ["pg_advisory_lock_shared", "pg_advisory_xact_lock_shared"],
  ["pg_try_advisory_lock", "pg_try_advisory_xact_lock"],
  ["pg_try_advisory_lock_shared", "pg_try_advisory_xact_lock_shared"],
]);

/** Settings that change how the server splits the text into tokens. */
const LEXER_SETTINGS: ReadonlySet<string> = new Set(["standard_conforming_strings", "client_encoding"]);

/**
 * Settings that change which table an unqualified name means, or whose rights a statement runs
 * with. Even for the transaction only they are refused: in batch-commit mode the batch's later
 * records share it, and a search_path with pg_temp turns a plain CREATE TABLE into a temporary one.
 */
const SCOPE_SETTINGS: ReadonlySet<string> = new Set(["search_path", "role", "session_authorization"]);

/** Why a setting may not change even for the transaction (SET LOCAL, a local set_config). */
function localSettingRefusal(name: string): string | undefined {
  const setting = asciiLower(name);
  if (LEXER_SETTINGS.has(setting)) return WHY.lexer;
  return SCOPE_SETTINGS.has(setting) ? WHY.scope : undefined;
}

/** Why the statement's leading keywords are refused (leading parentheses skipped). */
function statementRefusal(all: readonly Token[]): string | undefined {
  let skip = 0;
  while (isChar(all[skip], "(")) skip++;
  const t = all.slice(skip);
  switch (keyword(t, 0)) {
    case "begin":
    case "start":
      return WHY.open;
    case "commit":
      return keyword(t, 1) === "prepared" ? WHY.twoPhase : WHY.commit;
    case "end":
      return WHY.commit;
    case "abort":
      return WHY.rollback;
    case "rollback": {
      if (keyword(t, 1) === "prepared") return WHY.twoPhase;
      const to = keyword(t, 1) === "work" || keyword(t, 1) === "transaction" ? 2 : 1;
      return keyword(t, to) === "to" ? undefined : WHY.rollback;
    }
    case "prepare":
      return keyword(t, 1) === "transaction" ? WHY.twoPhase : WHY.prepare;
    case "set":
      // `SET transaction.x = 1` and `SET local.x TO 1` name a setting (for the session): the
      // word is a keyword only when no `.`, `=`, TO or FROM follows it.
      if (isChar(t[2], ".") || isChar(t[2], "=") || keyword(t, 2) === "to" || keyword(t, 2) === "from") {
        return WHY.set;
      }
      switch (keyword(t, 1)) {
        case "transaction":
        case "constraints":
          return undefined;
        case "local": {
          if (keyword(t, 2) === "names") return WHY.lexer;
          // SET LOCAL ROLE / SESSION AUTHORIZATION are keyword forms: refused with the settings below.
          const name = keyword(t, 2) === "session" ? "session_authorization" : nameAt(t, 2)?.name;
          return name === undefined ? undefined : localSettingRefusal(name);
        }
        default:
          return WHY.set;
      }
    case "reset":
      return WHY.reset;
    case "discard":
      return WHY.discard;
    case "listen":
    case "unlisten":
      return WHY.listen;
    case "deallocate":
      return WHY.deallocate;
    case "load":
      return WHY.load;
    case "create":
      return createRefusal(t);
    case "declare":
      return hasWords(t, ["with", "hold"]) ? WHY.hold : undefined;
    default:
      return sessionObjectRefusal(t);
  }
}

/**
 * A CREATE of a temporary object (TEMP / TEMPORARY, or anything in pg_temp), unless it is a table
 * dropped at commit: the object would outlive the transaction and, on a pooled connection, shadow a
 * real table of the same name for the next job.
 */
function createRefusal(t: readonly Token[]): string | undefined {
  const temporary = hasWord(t, "temp") || hasWord(t, "temporary") || hasName(t, "pg_temp");
  if (temporary && !hasWords(t, ["on", "commit", "drop"])) return WHY.temp;
  return undefined;
}

/** SELECT … INTO TEMP, and UPDATE of pg_settings (a SET in disguise), anywhere in a statement. */
function sessionObjectRefusal(t: readonly Token[]): string | undefined {
  // SELECT … INTO [LOCAL | GLOBAL] TEMP[ORARY] [TABLE] t, or INTO pg_temp.t.
  for (const scope of [[], ["local"], ["global"]]) {
    for (const word of ["temp", "temporary", "pg_temp"])
      if (hasWords(t, ["into", ...scope, word])) return WHY.temp;
  }
  if (hasWord(t, "update") && hasName(t, "pg_settings")) return WHY.settings;
  return undefined;
}

/** Whether the keyword (an unquoted word) occurs in the statement. */
function hasWord(t: readonly Token[], word: string): boolean {
  return t.some((_, i) => keyword(t, i) === word);
}

/** Whether the unquoted words occur one after another in the statement. */
function hasWords(t: readonly Token[], words: readonly string[]): boolean {
  return t.some((_, i) => words.every((word, k) => keyword(t, i + k) === word));
}

/** Whether a name (unquoted or quoted) occurs in the statement. */
function hasName(t: readonly Token[], name: string): boolean {
  return t.some((_, i) => nameAt(t, i)?.name === name);
}

/** Why a function the statement calls is refused: session advisory locks, set_config for the session. */
function callRefusal(tokens: readonly Token[]): string | undefined {
  for (let i = 0; i < tokens.length; i++) {
    const at = nameAt(tokens, i);
    if (at?.name === undefined || !isChar(tokens[at.next], "(")) continue;
    // Unquoted names were folded to lower case by the scan; a quoted name is taken as written.
    if (HARNESS_FUNCTIONS.has(at.name)) {
      return `${at.name} is the harness's own: the work may not withdraw or vouch for the fence`;
    }
    const xact = SESSION_LOCKS.get(at.name);
    if (xact !== undefined) {
      return `${at.name} takes a session-level lock, which outlives the transaction; use ${xact}`;
    }
    if (at.name !== "set_config") continue;
    const args = callArguments(tokens, at.next);
    const local = args?.[2];
    if (args?.length !== 3 || local?.length !== 1 || keyword(local, 0) !== "true") return WHY.setConfig;
    const setting = args[0] && literal(args[0]);
    // A name the guard cannot read could be any setting, the ones below among them.
    if (setting === undefined) return WHY.setConfigName;
    const refused = localSettingRefusal(setting);
    if (refused !== undefined) return refused;
  }
  return undefined;
}

/**
 * The index of the first token of a `CREATE [OR REPLACE] FUNCTION|PROCEDURE … BEGIN ATOMIC` body,
 * whose statements end with semicolons that do not end the CREATE. Only at parenthesis depth zero:
 * `f(begin atomic)` is a parameter named begin of type atomic. A body nested in a body is not
 * followed, so its END closes the outer one early: what follows is then checked as statements.
 */
function atomicBodyStart(tokens: readonly Token[]): number | undefined {
  if (keyword(tokens, 0) !== "create") return undefined;
  const kind = keyword(tokens, 1) === "or" && keyword(tokens, 2) === "replace" ? 3 : 1;
  if (keyword(tokens, kind) !== "function" && keyword(tokens, kind) !== "procedure") return undefined;
  let depth = 0;
  for (let i = kind + 1; i < tokens.length; i++) {
    if (isChar(tokens[i], "(")) depth++;
    else if (isChar(tokens[i], ")")) depth = Math.max(0, depth - 1);
    else if (depth === 0 && keyword(tokens, i) === "begin" && keyword(tokens, i + 1) === "atomic")
      return i + 2;
  }
  return undefined;
}

/** The arguments of the call whose `(` is at `open`, split at top-level commas; undefined if unclosed. */
function callArguments(tokens: readonly Token[], open: number): Token[][] | undefined {
  const args: Token[][] = [];
  let current: Token[] = [];
  let depth = 0;
  for (let i = open + 1; i < tokens.length; i++) {
    const t = tokens[i] as Token;
    if (t.kind === "char") {
      if (t.text === "(" || t.text === "[") depth++;
      else if (t.text === ")" || t.text === "]") {
        if (depth === 0) {
          args.push(current);
          return args;
        }
        depth--;
      } else if (t.text === "," && depth === 0) {
        args.push(current);
        current = [];
        continue;
      }
    }
    current.push(t);
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// The scan: PostgreSQL's lexical rules (src/backend/parser/scan.l), as far as they decide where a
// token, string or comment begins and ends. Where versions differ (numbers run into letters:
// `0x1F`, `1_000`, `1abc`), the later versions reject the text, so the older reading is the one
// that can run; it is the one taken here.
// ---------------------------------------------------------------------------------------------

type Token =
  /** An unquoted identifier or keyword, folded to lower case as the server folds it (ASCII only). */
  | { readonly kind: "word"; readonly text: string }
  /** A quoted identifier: its body as written (quotes still doubled), U&"…" or plain. */
  | { readonly kind: "ident"; readonly body: string; readonly unicode: boolean }
  /** A string constant: its body as written, continuation segments joined. */
  | { readonly kind: "string"; readonly body: string; readonly style: StringStyle }
  /** Anything else: a punctuation or operator character (one a token), a number, a parameter `$1`. */
  | { readonly kind: "char"; readonly text: string };

type StringStyle = "plain" | "escape" | "unicode" | "bits" | "dollar";

interface Statement {
  /** The statement's text, whitespace trimmed. */
  readonly text: string;
  readonly tokens: readonly Token[];
}

function scan(sql: string): Statement[] {
  const statements: Statement[] = [];
  let tokens: Token[] = [];
  let start = 0;
  let i = 0;
  const n = sql.length;
  const at = (k: number) => sql.charCodeAt(k);
  while (i < n) {
    const c = at(i);
    const next = at(i + 1);
    if (isSpace(c)) {
      i++;
    } else if (c === DASH && next === DASH) {
      i = lineEnd(sql, i);
    } else if (c === SLASH && next === STAR) {
      i = blockCommentEnd(sql, i);
    } else if (c === SEMICOLON) {
      statements.push({ text: trim(sql.slice(start, i)), tokens });
      tokens = [];
      start = ++i;
    } else if (c === QUOTE) {
      i = quoted(i + 1, "plain");
    } else if ((c === 0x45 || c === 0x65) && next === QUOTE) {
      i = quoted(i + 2, "escape"); // E'…'
    } else if ((c === 0x4e || c === 0x6e) && next === QUOTE) {
      i = quoted(i + 2, "plain"); // N'…'
    } else if ((c === 0x42 || c === 0x62 || c === 0x58 || c === 0x78) && next === QUOTE) {
      i = quoted(i + 2, "bits"); // B'…', X'…'
    } else if ((c === 0x55 || c === 0x75) && next === AMPERSAND && at(i + 2) === QUOTE) {
      i = quoted(i + 3, "unicode"); // U&'…'
    } else if ((c === 0x55 || c === 0x75) && next === AMPERSAND && at(i + 2) === DQUOTE) {
      i = identifier(i + 3, true);
    } else if (c === DQUOTE) {
      i = identifier(i + 1, false);
    } else if (c === DOLLAR) {
      i = dollar(i);
    } else if (isIdentStart(c)) {
      let j = i + 1;
      while (j < n && isIdentCont(at(j))) j++;
      tokens.push({ kind: "word", text: asciiLower(sql.slice(i, j)) });
      i = j;
    } else if (isDigit(c)) {
      i = number(i);
    } else {
      tokens.push({ kind: "char", text: sql[i] as string });
      i++;
    }
  }
  statements.push({ text: trim(sql.slice(start)), tokens });
  return statements;

  /** A string whose body starts at `from`; returns the index after it (the text's end if unclosed). */
  function quoted(from: number, style: Exclude<StringStyle, "dollar">): number {
    let body = "";
    let j = from;
    for (;;) {
      const close = closingQuote(sql, j, style === "escape");
      body += sql.slice(j, close);
      if (close >= n) {
        tokens.push({ kind: "string", body, style });
        return n;
      }
      // A quote, then whitespace holding a newline, then a quote: the same string goes on.
      const resume = continuation(sql, close + 1);
      if (resume === undefined) {
        tokens.push({ kind: "string", body, style });
        return close + 1;
      }
      j = resume + 1;
    }
  }

  function identifier(from: number, unicode: boolean): number {
    let j = from;
    for (;;) {
      const close = sql.indexOf('"', j);
      if (close === -1) {
        tokens.push({ kind: "ident", body: sql.slice(from), unicode });
        return n;
      }
      if (at(close + 1) !== DQUOTE) {
        tokens.push({ kind: "ident", body: sql.slice(from, close), unicode });
        return close + 1;
      }
      j = close + 2;
    }
  }

  /** `$1`, a dollar-quoted string `$tag$…$tag$`, or a lone `$`. */
  function dollar(from: number): number {
    let j = from + 1;
    if (isDigit(at(j))) {
      while (isDigit(at(j))) j++;
      tokens.push({ kind: "char", text: sql.slice(from, j) });
      return j;
    }
    if (isIdentStart(at(j)) && !isDigit(at(j))) while (j < n && isTagCont(at(j))) j++;
    if (at(j) !== DOLLAR) {
      tokens.push({ kind: "char", text: "$" });
      return from + 1;
    }
    const delimiter = sql.slice(from, j + 1);
    // The body ends at the first occurrence of the same delimiter, whatever else it holds.
    const close = sql.indexOf(delimiter, j + 1);
    const end = close === -1 ? n : close;
    tokens.push({ kind: "string", body: sql.slice(j + 1, end), style: "dollar" });
    return close === -1 ? n : close + delimiter.length;
  }

  /** Digits, an optional fraction and exponent; letters after them start a word (see above). */
  function number(from: number): number {
    let j = from;
    while (isDigit(at(j))) j++;
    // `1..10` is 1, `..`, 10.
    if (at(j) === DOT && at(j + 1) !== DOT) {
      j++;
      while (isDigit(at(j))) j++;
    }
    if (at(j) === 0x45 || at(j) === 0x65) {
      const sign = at(j + 1) === PLUS || at(j + 1) === DASH ? 1 : 0;
      if (isDigit(at(j + 1 + sign))) {
        j += 2 + sign;
        while (isDigit(at(j))) j++;
      }
    }
    tokens.push({ kind: "char", text: sql.slice(from, j) });
    return j;
  }
}

/** The index of the quote closing a string whose body starts at `from` (`sql.length` if none). */
function closingQuote(sql: string, from: number, backslashEscapes: boolean): number {
  for (let j = from; j < sql.length; j++) {
    const c = sql.charCodeAt(j);
    if (backslashEscapes && c === BACKSLASH) j++;
    else if (c === QUOTE) {
      if (sql.charCodeAt(j + 1) !== QUOTE) return j;
      j++;
    }
  }
  return sql.length;
}

/**
 * Where a string continues after its closing quote: the index of the next quote when only
 * whitespace and `--` comments, with at least one newline, come between (scan.l's quotecontinue).
 */
function continuation(sql: string, from: number): number | undefined {
  let newline = false;
  for (let j = from; j < sql.length; ) {
    const c = sql.charCodeAt(j);
    if (c === NEWLINE || c === RETURN) {
      newline = true;
      j++;
    } else if (isSpace(c)) {
      j++;
    } else if (c === DASH && sql.charCodeAt(j + 1) === DASH) {
      j = lineEnd(sql, j);
    } else {
      return c === QUOTE && newline ? j : undefined;
    }
  }
  return undefined;
}

/** The index of the newline ending the `--` comment at `from` (the text's end if none). */
function lineEnd(sql: string, from: number): number {
  for (let j = from + 2; j < sql.length; j++) {
    const c = sql.charCodeAt(j);
    if (c === NEWLINE || c === RETURN) return j;
  }
  return sql.length;
}

/** The index after the block comment at `from`. Block comments nest. */
function blockCommentEnd(sql: string, from: number): number {
  let depth = 0;
  for (let j = from + 2; j < sql.length - 1; j++) {
    const c = sql.charCodeAt(j);
    const next = sql.charCodeAt(j + 1);
    if (c === SLASH && next === STAR) {
      depth++;
      j++;
    } else if (c === STAR && next === SLASH) {
      if (depth === 0) return j + 2;
      depth--;
      j++;
    }
  }
  return sql.length;
}

/** The keyword at `i`: an unquoted word, lower case; a quoted identifier is never a keyword. */
function keyword(tokens: readonly Token[], i: number): string | undefined {
  const t = tokens[i];
  return t?.kind === "word" ? t.text : undefined;
}

function isChar(token: Token | undefined, text: string): boolean {
  return token?.kind === "char" && token.text === text;
}

/**
 * The name the word or quoted identifier at `i` stands for (undefined if its escapes are invalid,
 * which the server rejects) and the index after it, past a `UESCAPE 'c'` clause.
 */
function nameAt(tokens: readonly Token[], i: number): { name: string | undefined; next: number } | undefined {
  const t = tokens[i];
  if (t?.kind === "word") return { name: t.text, next: i + 1 };
  if (t?.kind !== "ident") return undefined;
  const body = t.body.replaceAll('""', '"');
  if (!t.unicode) return { name: body, next: i + 1 };
  const clause = uescape(tokens, i + 1);
  return clause === undefined
    ? { name: unicodeUnescape(body, "\\"), next: i + 1 }
    : { name: clause.char && unicodeUnescape(body, clause.char), next: i + 3 };
}

/** The value of an argument that is one string constant, or undefined. */
function literal(arg: readonly Token[]): string | undefined {
  const t = arg[0];
  if (t?.kind !== "string") return undefined;
  if (t.style === "unicode") {
    const clause = uescape(arg, 1);
    if (arg.length !== (clause === undefined ? 1 : 3)) return undefined;
    const char = clause === undefined ? "\\" : clause.char;
    return char && unicodeUnescape(t.body.replaceAll("''", "'"), char);
  }
  if (arg.length !== 1) return undefined;
  if (t.style === "escape") return escapeUnescape(t.body);
  return t.style === "dollar" ? t.body : t.body.replaceAll("''", "'");
}

/** A `UESCAPE 'c'` clause at `i`: its character, undefined inside if the character is not allowed. */
function uescape(tokens: readonly Token[], i: number): { char: string | undefined } | undefined {
  const quoted = tokens[i + 1];
  if (keyword(tokens, i) !== "uescape" || quoted?.kind !== "string") return undefined;
  const char = quoted.style === "escape" ? escapeUnescape(quoted.body) : quoted.body.replaceAll("''", "'");
  const valid = char?.length === 1 && !/[0-9A-Fa-f+'" \t\n\r\f\v]/.test(char);
  return { char: valid ? char : undefined };
}

/** The value of a U&'…' or U&"…" body: `\XXXX`, `\+XXXXXX` and `\\` (with `esc` for `\`). */
function unicodeUnescape(body: string, esc: string): string | undefined {
  let out = "";
  for (let i = 0; i < body.length; i++) {
    const c = body[i] as string;
    if (c !== esc) {
      out += c;
    } else if (body[i + 1] === esc) {
      out += esc;
      i++;
    } else {
      const long = body[i + 1] === "+";
      const hex = body.slice(i + (long ? 2 : 1), i + (long ? 8 : 5));
      const code = codePoint(hex, long ? 6 : 4);
      if (code === undefined) return undefined;
      out += code;
      i += long ? 7 : 4;
    }
  }
  return out;
}

/**
 * The value of an E'…' body. Octal and hex escapes give bytes; a byte above 0x7f stands for part
 * of a UTF-8 sequence and is kept as U+FFFD, enough for comparing with ASCII setting names.
 */
function escapeUnescape(body: string): string | undefined {
  let out = "";
  for (let i = 0; i < body.length; i++) {
    const c = body[i] as string;
    if (c === "'") {
      out += "'";
      i++;
    } else if (c !== "\\") {
      out += c;
    } else {
      const e = body[i + 1];
      if (e === undefined) return undefined;
      const simple = SIMPLE_ESCAPES[e];
      if (simple !== undefined) {
        out += simple;
        i++;
      } else if (/[0-7]/.test(e)) {
        const digits = /^[0-7]{1,3}/.exec(body.slice(i + 1))?.[0] ?? "";
        out += byte(Number.parseInt(digits, 8) & 0xff);
        i += digits.length;
      } else if (e === "x" && /[0-9A-Fa-f]/.test(body[i + 2] ?? "")) {
        const digits = /^[0-9A-Fa-f]{1,2}/.exec(body.slice(i + 2))?.[0] ?? "";
        out += byte(Number.parseInt(digits, 16));
        i += 1 + digits.length;
      } else if (e === "u" || e === "U") {
        const width = e === "u" ? 4 : 8;
        const code = codePoint(body.slice(i + 2, i + 2 + width), width);
        if (code === undefined) return undefined;
        out += code;
        i += 1 + width;
      } else {
        out += e;
        i++;
      }
    }
  }
  return out;
}

const SIMPLE_ESCAPES: Readonly<Record<string, string>> = { b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };

function byte(value: number): string {
  return value < 0x80 ? String.fromCharCode(value) : "\ufffd";
}

/** `width` hex digits as a character; a 4-digit surrogate stays a UTF-16 unit, to pair with the next. */
function codePoint(hex: string, width: number): string | undefined {
  if (hex.length !== width || !/^[0-9A-Fa-f]+$/.test(hex)) return undefined;
  const code = Number.parseInt(hex, 16);
  if (width === 4) return String.fromCharCode(code);
  return code <= 0x10ffff ? String.fromCodePoint(code) : undefined;
}

/** PostgreSQL folds unquoted identifiers to lower case in ASCII only (in UTF-8). */
function asciiLower(text: string): string {
  return text.replace(/[A-Z]+/g, (s) => s.toLowerCase());
}

/** Trims PostgreSQL's whitespace: space, tab, newline, carriage return, form feed, vertical tab. */
function trim(text: string): string {
  return text.replace(/^[ \t\n\r\f\v]+|[ \t\n\r\f\v]+$/g, "");
}

function isSpace(c: number): boolean {
  return c === 0x20 || (c >= 0x09 && c <= 0x0d);
}

function isDigit(c: number): boolean {
  return c >= 0x30 && c <= 0x39;
}

/** Letters, `_`, and anything outside ASCII (every byte of its UTF-8 form is above 0x7f). */
function isIdentStart(c: number): boolean {
  return (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || c === 0x5f || c >= 0x80;
}

/** An identifier goes on through digits and `$`: `x$$` is one identifier, not x and a dollar quote. */
function isIdentCont(c: number): boolean {
  return isIdentStart(c) || isDigit(c) || c === DOLLAR;
}

/** A dollar-quote tag goes on through digits but not `$`. */
function isTagCont(c: number): boolean {
  return isIdentStart(c) || isDigit(c);
}

const BACKSLASH = 0x5c;
const QUOTE = 0x27;
const DQUOTE = 0x22;
const DOLLAR = 0x24;
const DASH = 0x2d;
const PLUS = 0x2b;
const DOT = 0x2e;
const SLASH = 0x2f;
const STAR = 0x2a;
const SEMICOLON = 0x3b;
const AMPERSAND = 0x26;
const NEWLINE = 0x0a;
const RETURN = 0x0d;
