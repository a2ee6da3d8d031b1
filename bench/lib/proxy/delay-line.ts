/**
 * The proxy worker's delay: items handed to `push` come out of `deliver` `oneWayDelayMs` later, in
 * the order they went in, with sub-millisecond precision and no spinning.
 *
 * One FIFO of items with their due time from `process.hrtime.bigint()` (one delay for everything,
 * so due times are in arrival order and byte order per connection is kept). Node timers have
 * millisecond granularity, so a wait longer than ~1.5 ms uses setTimeout for the bulk, and the
 * sub-millisecond remainder sleeps in the kernel with `Atomics.wait` on a SharedArrayBuffer in
 * slices of at most 0.1 ms, yielding to the event loop (setImmediate) after each slice so socket
 * reads and writes go on. A kernel sleep overshoots by ~65 µs (timer slack), so each sleep asks for
 * that much less (a running estimate), and an item due within half an overshoot goes at once: each
 * goes within about ±35 µs of its due time. Nothing pending: nothing scheduled, no CPU. An item
 * pushed while the worker sleeps is stamped when it is read, so under concurrent traffic its delay
 * can exceed the configured one by up to a slice.
 */

/** Longest kernel sleep before the worker looks at its sockets again. */
const MAX_SLICE_NS = 100_000;
/**
 * A kernel sleep overshoots what was asked (Linux timer slack, 50 µs by default, plus the wake-up:
 * ~65 µs measured here); the line keeps a running estimate of it.
 */
const INITIAL_OVERSHOOT_NS = 60_000;
const MIN_SLEEP_NS = 1_000;
const MAX_OVERSHOOT_NS = 200_000;
/** Waits longer than this use a timer for all but the last millisecond. */
const TIMER_ABOVE_NS = 1_500_000n;

export interface DelayLine<T> {
  push(item: T): void;
  /** Drops everything pending. */
  clear(): void;
  /** Items that waited, and how late after their due time they went, in total (µs; early is negative). */
  readonly counts: { readonly delayed: number; readonly lateUsTotal: number };
}

export function delayLine<T>(oneWayDelayMs: number, deliver: (item: T) => void): DelayLine<T> {
  const delayNs = BigInt(Math.round(oneWayDelayMs * 1e6));
  const sleeper = new Int32Array(new SharedArrayBuffer(4));
  const counts = { delayed: 0, lateUsTotal: 0 };
  let queue: Array<{ readonly due: bigint; readonly item: T }> = [];
  let head = 0;
  let scheduled = false;
  let overshootNs = INITIAL_OVERSHOOT_NS;

  /** Delivers everything due by `now` (plus half the sleep overshoot: see `tick`). */
  const flush = (now: bigint) => {
    const horizon = now + BigInt(Math.round(overshootNs / 2));
    while (head < queue.length) {
      const pending = queue[head];
      if (!pending || pending.due > horizon) break;
      head++;
      counts.delayed++;
      counts.lateUsTotal += Number(now - pending.due) / 1000;
      deliver(pending.item);
    }
    if (head === queue.length) {
      queue = [];
      head = 0;
    } else if (head > 4096 && head * 2 > queue.length) {
      queue = queue.slice(head);
      head = 0;
    }
  };

  /** A kernel sleep of `ns` (at least the overshoot, whatever is asked); updates the overshoot estimate. */
  const sleep = (ns: number): bigint => {
    const before = process.hrtime.bigint();
    Atomics.wait(sleeper, 0, 0, ns / 1e6);
    const after = process.hrtime.bigint();
    const overshoot = Math.min(MAX_OVERSHOOT_NS, Math.max(0, Number(after - before) - ns));
    overshootNs += (overshoot - overshootNs) / 8;
    return after;
  };

  /**
   * Delivers what is due; then, while anything waits: a timer for a wait over ~1.5 ms, else one
   * kernel sleep (a slice at most) and a turn of the event loop for socket I/O. A sleep overshoots
   * by `overshootNs`, so one is asked for that much less; an item due within half an overshoot goes
   * at once, and one due later than that but within an overshoot gets the shortest sleep. Either way
   * it goes within ±overshoot/2 of its due time (~±35 µs here), and the worker never spins.
   */
  const tick = () => {
    scheduled = false;
    flush(process.hrtime.bigint());
    const next = queue[head];
    if (!next) return; // idle: nothing scheduled until the next item
    const remainingNs = next.due - process.hrtime.bigint();
    scheduled = true;
    if (remainingNs > TIMER_ABOVE_NS) {
      setTimeout(tick, Number(remainingNs / 1_000_000n) - 1);
      return;
    }
    flush(sleep(Math.max(MIN_SLEEP_NS, Math.min(MAX_SLICE_NS, Number(remainingNs) - overshootNs))));
    setImmediate(tick); // let socket I/O run, then look again
  };

  return {
    counts,
    push(item) {
      if (delayNs === 0n && head === queue.length) {
        deliver(item);
        return;
      }
      queue.push({ due: process.hrtime.bigint() + delayNs, item });
      if (!scheduled) {
        scheduled = true;
        setImmediate(tick);
      }
    },
    clear() {
      queue = [];
      head = 0;
    },
  };
}
