import { describe, expect, it } from "vitest";
import { isFifoQueue, queueUrlFromArn } from "../../shared/sqs/queue-url.ts";

describe("queueUrlFromArn", () => {
  it.each([
    ["arn:aws:sqs:us-east-1:123456789012:orders", "https://sqs.us-east-1.amazonaws.com/123456789012/orders"],
    [
      "arn:aws:sqs:eu-west-1:123456789012:orders.fifo",
      "https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo",
    ],
    [
      "arn:aws-cn:sqs:cn-north-1:123456789012:orders",
      "https://sqs.cn-north-1.amazonaws.com.cn/123456789012/orders",
    ],
    [
      "arn:aws-cn:sqs:cn-northwest-1:123456789012:orders.fifo",
      "https://sqs.cn-northwest-1.amazonaws.com.cn/123456789012/orders.fifo",
    ],
    [
      "arn:aws-us-gov:sqs:us-gov-west-1:123456789012:orders",
      "https://sqs.us-gov-west-1.amazonaws.com/123456789012/orders",
    ],
    [
      "arn:aws:sqs:us-east-1:000000000000:jobfence-backstop_dlq-1",
      "https://sqs.us-east-1.amazonaws.com/000000000000/jobfence-backstop_dlq-1",
    ],
  ])("%s → %s", (arn, url) => {
    expect(queueUrlFromArn(arn)).toBe(url);
  });

  it.each([
    "",
    "orders",
    "https://sqs.us-east-1.amazonaws.com/123456789012/orders",
    "arn:aws:sns:us-east-1:123456789012:orders",
    "arn:aws:sqs:us-east-1:123456789012",
    "arn:aws:sqs:us-east-1:123456789012:",
    "arn:aws:sqs:us-east-1:123456789012:orders:extra",
    "urn:aws:sqs:us-east-1:123456789012:orders",
    "ARN:aws:sqs:us-east-1:123456789012:orders",
  ])("refuses the malformed ARN %j", (arn) => {
    expect(() => queueUrlFromArn(arn)).toThrow(Error);
  });
});

describe("isFifoQueue", () => {
  it.each([
    ["arn:aws:sqs:us-east-1:123456789012:orders.fifo", true],
    ["https://sqs.us-east-1.amazonaws.com/123456789012/orders.fifo", true],
    ["arn:aws:sqs:us-east-1:123456789012:orders", false],
    ["https://sqs.us-east-1.amazonaws.com/123456789012/orders", false],
    ["arn:aws:sqs:us-east-1:123456789012:fifo", false],
    ["arn:aws:sqs:us-east-1:123456789012:orders.fifo-archive", false],
    ["arn:aws:sqs:us-east-1:123456789012:orders-fifo", false],
  ])("%s → %s", (arnOrUrl, expected) => {
    expect(isFifoQueue(arnOrUrl)).toBe(expected);
  });

  it("agrees between an ARN and the URL made from it", () => {
    for (const arn of ["arn:aws:sqs:us-east-1:1:a", "arn:aws:sqs:us-east-1:1:a.fifo"]) {
      expect(isFifoQueue(queueUrlFromArn(arn))).toBe(isFifoQueue(arn));
    }
  });
});
