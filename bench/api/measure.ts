/**
 * The timing of bench/api.ts: each operation's calls one after another on the timed handler,
 * warm-up calls first and left out, each call timed from event to response; a call answered with
 * another status than the operation's counts as an error. And the keyset walk: the list's
 * next_cursor followed page after page, each page timed, to reach the deep page.
 */
import { ascending, mean, ms } from "../lib/report.ts";
import { percentile } from "../lib/support.ts";
import { type ApiUnderTest, apiEvent, BASE, invoke } from "./handler.ts";
import { BUDGET_P95_MS, type Operation, TARGET_P95_MS } from "./operation.ts";

export interface OperationResult {
  key: string;
  operation: string;
  family: string;
  iterations: number;
  warmup: number;
  p50_ms: number;
  p95_ms: number;
  p99_ms: number;
  max_ms: number;
  mean_ms: number;
  errors: number;
  first_error: string | null;
  /** The p95 target in ms, or null: reported, not held to one. */
  target_ms: number | null;
  meets_target: boolean | null;
  meets_seed_budget: boolean;
}

const round3 = (value: number) => Math.round(value * 1000) / 1000;

export function summarize(
  operation: Pick<Operation, "key" | "name" | "family" | "target" | "warmup">,
  times: readonly number[],
  errors: number,
  firstError: string | null,
): OperationResult {
  const sorted = ascending(times);
  const p95 = percentile(sorted, 95);
  return {
    key: operation.key,
    operation: operation.name,
    family: operation.family,
    iterations: times.length,
    warmup: operation.warmup,
    p50_ms: round3(percentile(sorted, 50)),
    p95_ms: round3(p95),
    p99_ms: round3(percentile(sorted, 99)),
    max_ms: round3(sorted.at(-1) ?? Number.NaN),
    mean_ms: round3(times.length === 0 ? 0 : mean(times)),
    errors,
    first_error: firstError,
    target_ms: operation.target ? TARGET_P95_MS : null,
    meets_target: operation.target ? errors === 0 && p95 < TARGET_P95_MS : null,
    meets_seed_budget: errors === 0 && p95 < BUDGET_P95_MS,
  };
}

/** Follows next_cursor from the first page for up to `pages` pages; the query of the page after them. */
export async function walkKeyset(
  under: ApiUnderTest,
  pages: number,
): Promise<{ times: number[]; depth: number; query: Record<string, string> }> {
  const times: number[] = [];
  let cursor: string | null = null;
  for (let page = 0; page < pages; page++) {
    const query: Record<string, string> = cursor === null ? {} : { cursor };
    const { response, ms: took } = await invoke(
      under.api,
      apiEvent("GET", BASE, under.tokens.read, { query }),
    );
    if (response.statusCode !== 200) throw new Error(`list page ${page + 1}: ${response.body}`);
    times.push(took);
    const body = JSON.parse(response.body ?? "{}") as { next_cursor: string | null };
    if (body.next_cursor === null) break;
    cursor = body.next_cursor;
  }
  console.log(`keyset walk: ${times.length} pages of 50 followed; timing page ${times.length + 1}`);
  return { times, depth: times.length, query: cursor === null ? {} : { cursor } };
}

/** Times every operation in turn; also counts the stubbed SQS sends of the single replays. */
export async function measureOperations(
  under: ApiUnderTest,
  operations: readonly Operation[],
): Promise<{ results: OperationResult[]; replaySends: number }> {
  const results: OperationResult[] = [];
  let sendsBeforeReplay = 0;
  for (const operation of operations) {
    await operation.prepare?.();
    if (operation.key === "replay_single") sendsBeforeReplay = under.sqsSends();
    const times: number[] = [];
    let errors = 0;
    let firstError: string | null = null;
    for (let n = 0; n < operation.warmup + operation.iterations; n++) {
      const { response, ms: took } = await invoke(under.api, operation.event(n));
      if (response.statusCode !== operation.status) {
        errors++;
        firstError ??= `${response.statusCode}: ${response.body ?? ""}`.slice(0, 500);
      }
      if (n >= operation.warmup) times.push(took);
    }
    const result = summarize(operation, times, errors, firstError);
    results.push(result);
    console.log(
      `  ${operation.name.padEnd(48)} p50 ${ms(result.p50_ms).padStart(8)}  p95 ${ms(result.p95_ms).padStart(8)} ms` +
        (errors > 0 ? `  ${errors} ERRORS, first: ${firstError}` : ""),
    );
  }
  return { results, replaySends: under.sqsSends() - sendsBeforeReplay };
}
