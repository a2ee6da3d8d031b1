/** The consumer suites (consumer-suite.ts, record-path-suite.ts) in batch-commit mode: every guarantee of per-record mode. */
import { describe } from "vitest";
import { consumerSuite } from "./consumer-suite.ts";
import { recordPathSuite } from "./record-path-suite.ts";

describe("consumer", () => consumerSuite("batch"));
describe("record path", () => recordPathSuite("batch"));
