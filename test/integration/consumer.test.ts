/** The consumer suites (consumer-suite.ts, record-path-suite.ts) in per-record commit mode, the default. */
import { describe } from "vitest";
import { consumerSuite } from "./consumer-suite.ts";
import { recordPathSuite } from "./record-path-suite.ts";

describe("consumer", () => consumerSuite("per-record"));
describe("record path", () => recordPathSuite("per-record"));
