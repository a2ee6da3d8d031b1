/**
 * `npm run openapi`: writes docs/openapi.json from the code (functions/dead-letters-api/openapi.ts).
 * `npm run openapi -- --check`: exits 1 when the committed file differs from what the code gives.
 *
 * The file holds exactly the bytes the API serves at GET /v1/core/openapi.json (2-space JSON and a
 * final newline), so Biome leaves its formatting alone (biome.json).
 */
import { readFile, writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { OPENAPI_DOCUMENT_PATH, renderOpenApiDocument } from "../functions/dead-letters-api/openapi.ts";

const target = fileURLToPath(new URL(`../${OPENAPI_DOCUMENT_PATH}`, import.meta.url));

const args = process.argv.slice(2);
const unknown = args.filter((arg) => arg !== "--check");
if (unknown.length > 0) {
  console.error(`unknown argument ${unknown.join(" ")}; usage: npm run openapi [-- --check]`);
  process.exit(2);
}
const check = args.includes("--check");

const expected = renderOpenApiDocument();

if (check) {
  const committed = await readFile(target, "utf8").catch((error: NodeJS.ErrnoException) => {
    if (error.code === "ENOENT") return undefined;
    throw error;
  });
  if (committed !== expected) {
    console.error(
      `${OPENAPI_DOCUMENT_PATH} ${committed === undefined ? "is missing" : "does not match the code"} ` +
        "(functions/dead-letters-api/routes.ts and the zod schemas it uses).\n" +
        "Run `npm run openapi` and commit the result.",
    );
    process.exit(1);
  }
  console.log(`${OPENAPI_DOCUMENT_PATH} matches the code.`);
} else {
  await writeFile(target, expected);
  console.log(`wrote ${OPENAPI_DOCUMENT_PATH}`);
}
