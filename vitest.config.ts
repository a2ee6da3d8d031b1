import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/support/global-setup.ts"],
    pool: "forks",
    testTimeout: 30_000,
    hookTimeout: 120_000,
    // Powertools writes EMF and JSON logs to stdout; tests that check them enable them explicitly.
    // POWERTOOLS_LOG_LEVEL=DEBUG npm test … shows them while debugging.
    env: {
      POWERTOOLS_METRICS_DISABLED: process.env.POWERTOOLS_METRICS_DISABLED ?? "true",
      POWERTOOLS_LOG_LEVEL: process.env.POWERTOOLS_LOG_LEVEL ?? "SILENT",
    },
  },
});
