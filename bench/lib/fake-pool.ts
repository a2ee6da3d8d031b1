/**
 * A pg.Pool stand-in whose clients answer every statement at once (a resolved promise) with the
 * shapes the harness expects, so what a benchmark times on it is JavaScript alone: no socket
 * writes, no server woken on the same core, no pg protocol work (bench/experiments/harness-cpu.ts).
 *
 * It knows what the harness and the bare loop send: BEGIN, COMMIT, ROLLBACK; the fence message
 * (shared/db/queries/begin-with-fences.ts: BEGIN, the fence mark answering its scope, the insert
 * answering each fence's job_id and xid, every fence fresh); the fence COMMIT
 * (shared/fence/fence-transaction.ts: the check, COMMIT and the session resets); award-points'
 * statement (functions/award-points/award.ts), sent as text or as a pg.Query the work's guarded
 * connection submits.
 */

type FakeResult = { command: string; rowCount: number; rows: unknown[]; fields: never[] };

const result = (command: string, rows: unknown[] = [], rowCount = rows.length): FakeResult =>
  ({ command, rowCount, rows, fields: [] }) satisfies FakeResult;

/** A statement pg would submit itself (a pg.Query): answered through its callback. */
interface Submitted {
  readonly text: string;
  callback?: (error: Error | null, answer: unknown) => void;
}

let nextXid = 1000;

/** How many statements of a message joined with ";\n" start before `end`. */
function statementsBefore(text: string, end: number): number {
  let count = 0;
  for (let at = text.indexOf(";\n"); at !== -1 && at < end; at = text.indexOf(";\n", at + 2)) count += 1;
  return count;
}

/** One pooled connection of the fake. */
class FakeClient {
  #status: "I" | "T" = "I";
  /** Queries answered: round trips, had it been a server. */
  queries = 0;
  readonly release: (error?: Error | boolean) => void;
  constructor(release: (error?: Error | boolean) => void) {
    this.release = release;
  }

  getTransactionStatus(): string {
    return this.#status;
  }

  query(config: unknown): unknown {
    this.queries += 1;
    const text = typeof config === "string" ? config : (config as Submitted).text;
    const submitted =
      typeof (config as Submitted).callback === "function" ? (config as Submitted) : undefined;
    if (submitted) {
      const answer = this.#answer(text);
      queueMicrotask(() => submitted.callback?.(null, answer));
      return submitted;
    }
    try {
      return Promise.resolve(this.#answer(text));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  #answer(text: string): FakeResult | FakeResult[] {
    const insert = text.startsWith("BEGIN;\n") ? text.indexOf("INSERT INTO core.processed_jobs") : -1;
    if (insert !== -1) {
      this.#status = "T";
      // One VALUES row per fence, `('<job id>', …)`, joined by ",\n"; the job ids are UUIDs.
      const xid = String(nextXid++);
      const rows: { job_id: string; xid: string }[] = [];
      for (let at = text.indexOf("VALUES ("); at !== -1; at = text.indexOf(",\n(", at + 1)) {
        const start = text.indexOf("'", at) + 1;
        rows.push({ job_id: text.slice(start, text.indexOf("'", start)), xid });
      }
      // BEGIN, then any statement before the insert (the fence mark, which answers its scope).
      const marks = Array.from({ length: statementsBefore(text, insert) - 1 }, () =>
        result("SELECT", [{ scope: "fake" }]),
      );
      return [result("BEGIN"), ...marks, result("INSERT", rows)];
    }
    if (text.startsWith("SELECT core.fence_commit_check(") || text.startsWith("SELECT;\n")) {
      this.#status = "I";
      const resets = Array.from({ length: statementsBefore(text, text.length) - 1 }, () => result("RESET"));
      return [result("SELECT", [{}]), result("COMMIT"), ...resets];
    }
    if (text === "BEGIN" || text === "COMMIT" || text === "ROLLBACK") {
      this.#status = text === "BEGIN" ? "T" : "I";
      return result(text);
    }
    if (text.includes("award_points.")) return result("INSERT", [], 1);
    throw new Error(`the fake database does not know: ${text.slice(0, 80)}`);
  }
}

/** The pool: `connect` hands out an idle fake client (made when none is idle). */
export class FakePool {
  readonly #all: FakeClient[] = [];
  readonly #idle: FakeClient[] = [];

  connect(): Promise<FakeClient> {
    let client = this.#idle.pop();
    if (!client) {
      const made: FakeClient = new FakeClient(() => this.#idle.push(made));
      this.#all.push(made);
      client = made;
    }
    return Promise.resolve(client);
  }

  on(): this {
    return this;
  }

  /** Queries answered by all its clients so far. */
  get queries(): number {
    return this.#all.reduce((n, c) => n + c.queries, 0);
  }
}
