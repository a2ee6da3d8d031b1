/** What every jobfence middleware is given: a prepared consumer, whose spine it adapts. */
import type { RecordSpine } from "../record/spine.ts";

/** A prepared consumer (shared/consumer.ts `prepareConsumer`), as the middlewares see it. */
export interface SpineOf<P> {
  // biome-ignore lint/suspicious/noExplicitAny: the middlewares need only the spine's steps, whatever its schema
  readonly spine: RecordSpine<any> & { readonly __payload?: P };
}
