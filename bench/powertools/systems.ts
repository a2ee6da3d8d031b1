/**
 * What the benchmark's parts share and the crash child must know without loading them: the
 * systems' names, the SQS batch size, the crash points, and what the child is told.
 */
import type { SQSRecord } from "aws-lambda";
import type { StoreAddress } from "./stores.ts";

/** SQS batch size of every variant (Lambda's default for SQS). */
export const BATCH_SIZE = 10;

export const LABELS = {
  perRecord: "jobfence per-record",
  batch: "jobfence batch 10",
  dynamodb: "Powertools + DynamoDB",
  redis: "Powertools + Redis",
} as const;
export type SystemLabel = (typeof LABELS)[keyof typeof LABELS];

export const POINTS = ["P1", "P2", "P3"] as const;
export type Point = (typeof POINTS)[number];
export const POINT_NAMES: Record<Point, string> = {
  P1: "before the effect commits",
  P2: "after the effect commits, before the store records completion",
  P3: "after both, before the ack",
};

/** What the child is told (bench/lib/crash-protocol.ts). */
export interface CrashChildConfig {
  readonly system: SystemLabel;
  readonly point: Point;
  /** The record (1-based, in the invocation's order) at whose point the child dies (P1, P2). */
  readonly nth: number;
  readonly records: SQSRecord[];
  readonly databaseUrl: string;
  /** Powertools' store. */
  readonly store?: StoreAddress;
  readonly keyPrefix: string;
  /** The Lambda context's remaining time at the start of the invocation (Powertools). */
  readonly timeoutMs: number;
}
