/**
 * Following a bulk operation until it finishes: a progress bar redrawn in place on a terminal,
 * a plain line per change otherwise (logs, CI), one JSON body per change with --json.
 */
import type { Connection } from "./connection.ts";
import { oneLine, plural } from "./format.ts";
import { call, idPath, OPERATIONS_PATH } from "./http.ts";
import { EXIT, type OpsIo } from "./io.ts";
import {
  describeOperation,
  type OperationDetail,
  progressBar,
  progressLine,
  succeeded,
} from "./operation-view.ts";

/** Clears the terminal's current line (carriage return, erase to its end). */
const CLEAR_LINE = "\r\u001b[K";

const defaultSleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export interface WatchOptions {
  readonly json: boolean;
  /** Between two polls. */
  readonly intervalMs: number;
}

/** Polls the operation until it is no longer running; prints its progress; resolves to the last state. */
export async function watchOperation(
  conn: Connection,
  io: OpsIo,
  id: string,
  options: WatchOptions,
): Promise<OperationDetail> {
  const sleep = io.sleep ?? defaultSleep;
  const terminal = options.json ? undefined : io.terminal;
  let last: string | undefined;
  for (;;) {
    const result = await call<OperationDetail>(conn, "GET", idPath(id, OPERATIONS_PATH));
    const op = result.body;
    // A change is what the operator watches for; the same state again is not worth a line.
    const state = `${op.status} ${op.processed} ${op.replayed} ${op.superseded} ${op.discarded} ${op.conflicts} ${op.failed}`;
    if (terminal !== undefined) {
      terminal.write(`${CLEAR_LINE}${progressBar(op, terminal.columns)}`);
    } else if (state !== last) {
      io.out(options.json ? oneLine(result.text) : progressLine(op));
    }
    last = state;
    if (op.status !== "running") {
      if (terminal !== undefined) terminal.write(CLEAR_LINE);
      return op;
    }
    await sleep(options.intervalMs);
  }
}

/**
 * The end of a watch: the operation in full (human output) and the exit code — 0 when it did all
 * it planned, 1 when it failed, was cancelled, or left dead letters pending because a send failed.
 */
export function finishWatch(io: OpsIo, op: OperationDetail, json: boolean): number {
  if (!json) for (const line of describeOperation(op)) io.out(line);
  if (succeeded(op)) return EXIT.ok;
  if (op.failed > 0) {
    io.err(
      `${plural(op.failed, "dead letter")} failed to send and stay pending_review; fix the cause and replay again`,
    );
  }
  if (op.status !== "completed") io.err(`the ${op.kind} operation ${op.id} ended ${op.status}`);
  return EXIT.failed;
}
