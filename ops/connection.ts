/**
 * Which API the CLI talks to and with which token: from flags, then the environment, then the
 * local stack's description (.local/stack.json, or the one in JOBFENCE_LOCAL_DIR, written by
 * `npm start`). The same tool serves a
 * deployed API (flags or environment) and the local stack (no configuration at all).
 */
import { readFile } from "node:fs/promises";
import { localDirFromEnv, stackFilePath } from "../local/local-dir.ts";
import { UsageError } from "./errors.ts";
import type { OpsIo } from "./io.ts";
import { clean } from "./text.ts";

/** Where the API is and how to authenticate to it. */
export interface Connection {
  /** The API's base URL, without a trailing slash. */
  readonly baseUrl: string;
  readonly token: string;
  readonly fetch: typeof fetch;
}

/** The connection flags (global options of the program). */
export interface ConnectionFlags {
  readonly api?: string | undefined;
  readonly token?: string | undefined;
}

interface StackFile {
  readonly apiUrl?: unknown;
  readonly tokens?: { readonly admin?: unknown };
}

async function readStack(path: string): Promise<StackFile | undefined> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    if ((error as { code?: unknown }).code === "ENOENT") return undefined;
    throw new UsageError(`cannot read ${path}: ${(error as Error).message}`, { showHelp: false });
  }
  try {
    const parsed: unknown = JSON.parse(text);
    return typeof parsed === "object" && parsed !== null ? (parsed as StackFile) : {};
  } catch (error) {
    throw new UsageError(`${path} is not valid JSON: ${(error as Error).message}`, { showHelp: false });
  }
}

function nonEmpty(value: string | undefined): string | undefined {
  return value !== undefined && value.trim() !== "" ? value.trim() : undefined;
}

/** Whether `host` (a URL's hostname) is this machine: where the local stack serves its API. */
export function isLoopback(host: string): boolean {
  return host === "localhost" || host === "[::1]" || /^127\.\d+\.\d+\.\d+$/.test(host);
}

/** The API URL and token, from flags, then the environment, then the local stack. */
export async function connect(flags: ConnectionFlags, io: OpsIo): Promise<Connection> {
  const stackFile = io.stackFile ?? stackFilePath(localDirFromEnv(io.env));
  // Read at most once, and only when a flag or variable is missing.
  let stack: Promise<StackFile | undefined> | undefined;
  const loadStack = () => {
    stack ??= readStack(stackFile);
    return stack;
  };

  let api = nonEmpty(flags.api) ?? nonEmpty(io.env.JOBFENCE_API_URL);
  if (api === undefined) {
    const local = await loadStack();
    if (typeof local?.apiUrl !== "string" || local.apiUrl === "") {
      throw new UsageError(
        [
          "no API URL: pass --api <url> or set JOBFENCE_API_URL",
          local === undefined
            ? `(no local stack: ${stackFile} does not exist; \`npm start\` writes it)`
            : `(${stackFile} has no apiUrl: that local stack does not serve the API)`,
        ].join("\n"),
        { showHelp: false },
      );
    }
    api = local.apiUrl;
  }
  let base: URL;
  try {
    base = new URL(api);
  } catch {
    throw new UsageError(`the API URL is not a URL: ${clean(api)}`, { showHelp: false });
  }
  if (base.protocol !== "http:" && base.protocol !== "https:") {
    throw new UsageError(`the API URL must be http(s): ${clean(api)}`, { showHelp: false });
  }
  const baseUrl = base.href.replace(/\/+$/, "");

  let token = nonEmpty(flags.token) ?? nonEmpty(io.env.JOBFENCE_TOKEN);
  if (token === undefined) {
    const local = await loadStack();
    const stackApi = typeof local?.apiUrl === "string" ? local.apiUrl.replace(/\/+$/, "") : undefined;
    const admin = local?.tokens?.admin;
    // The local stack's token is only offered to the local stack's API, never to another one.
    if (typeof admin !== "string" || admin === "" || stackApi !== baseUrl) {
      throw new UsageError("no token: pass --token <jwt> or set JOBFENCE_TOKEN", { showHelp: false });
    }
    token = admin;
    io.err(`using the local stack's admin token from ${stackFile}`);
  }
  if (base.protocol === "http:" && !isLoopback(base.hostname)) {
    io.err(`warning: sending the bearer token over plain http to ${base.host}`);
  }
  return { baseUrl, token, fetch: io.fetch ?? globalThis.fetch };
}
