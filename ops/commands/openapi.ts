/** `dead-letters openapi`: the OpenAPI document of the API the CLI talks to, as the server sends it. */
import type { Command } from "commander";
import { defineAction, type Runtime } from "../command.ts";
import { call, OPENAPI_PATH } from "../http.ts";
import { EXIT } from "../io.ts";

export function registerOpenApi(group: Command, runtime: Runtime): void {
  const command = group
    .command("openapi")
    .summary("print the API's OpenAPI document")
    .description(
      "Print the OpenAPI 3.1 document the API serves (GET /v1/core/openapi.json), exactly as sent: " +
        "the contract of the version deployed, to generate a client from or compare with docs/openapi.json.",
    );

  defineAction(command, runtime, async ({ io, connect }) => {
    const conn = await connect();
    const result = await call<unknown>(conn, "GET", OPENAPI_PATH);
    // Line by line, so the output with a final newline is the document byte for byte (--json or not).
    for (const line of result.text.replace(/\n$/, "").split("\n")) io.out(line);
    return EXIT.ok;
  });
}
