/**
 * Just enough of the PostgreSQL wire protocol (v3) for the proxy to find COMMITs as bytes stream
 * past, whatever the TCP chunking: the client's messages are framed (an untyped startup message,
 * its length first, then typed messages: a type byte and a length that counts itself but not the
 * type), and the server's are framed from a message boundary on, to see its ReadyForQuery.
 */

const QUERY = 0x51; // 'Q'
const READY_FOR_QUERY = 0x5a; // 'Z'
const SSL_REQUEST = 80877103;
const GSS_ENCRYPTION_REQUEST = 80877104;
/** A simple query longer than this is not a COMMIT anyone sends: its text is not kept. */
const MAX_KEPT_QUERY = 1024;
/** An untyped message longer than this is not a startup message: TLS after an accepted SSLRequest. */
const MAX_STARTUP = 10_000;

/**
 * Whether a frontend message is a simple query ('Q', its length, the text and its terminator)
 * one of whose statements is COMMIT: the harness sends its COMMIT between the fence check and the
 * session resets, in one message, and a plain `COMMIT` is the same with nothing around it.
 */
export function isCommitQuery(message: Buffer): boolean {
  if (message.length < 6 || message[0] !== QUERY || message.readInt32BE(1) + 1 !== message.length)
    return false;
  return /(^|;)\s*COMMIT\s*(;|$)/i.test(message.subarray(5, message.length - 1).toString("utf8"));
}

/**
 * Reads one connection's client side: each call takes the next chunk and says whether a COMMIT
 * query ended in it. A message may span chunks and a chunk hold several. An SSLRequest or
 * GSSENCRequest leaves the next message untyped (the server refused, a startup follows); what
 * follows an accepted one is encrypted, has no plausible startup length, and is passed on unread.
 */
export function frontendReader(): (chunk: Buffer) => boolean {
  let untyped = true;
  let unreadable = false;
  let header = Buffer.alloc(0);
  /** Bytes of the current message still to come. */
  let remaining = 0;
  /** The current message so far, when it is a short simple query. */
  let kept: Buffer[] | undefined;
  return (chunk) => {
    let commit = false;
    let offset = 0;
    while (!unreadable && offset < chunk.length) {
      if (remaining > 0) {
        const take = Math.min(remaining, chunk.length - offset);
        kept?.push(chunk.subarray(offset, offset + take));
        offset += take;
        remaining -= take;
        if (remaining === 0 && kept) {
          commit ||= isCommitQuery(Buffer.concat(kept));
          kept = undefined;
        }
        continue;
      }
      // An untyped message's header: its length and its code (protocol version or request).
      const need = untyped ? 8 : 5;
      const take = Math.min(need - header.length, chunk.length - offset);
      header = Buffer.concat([header, chunk.subarray(offset, offset + take)]);
      offset += take;
      if (header.length < need) break;
      if (untyped) {
        const length = header.readInt32BE(0);
        const code = header.readInt32BE(4);
        if (length < 8 || length > MAX_STARTUP) unreadable = true;
        else if (code !== SSL_REQUEST && code !== GSS_ENCRYPTION_REQUEST) untyped = false;
        remaining = length - 8;
      } else {
        const length = header.readInt32BE(1) + 1;
        remaining = length - 5;
        kept = header[0] === QUERY && length <= MAX_KEPT_QUERY ? [header] : undefined;
      }
      header = Buffer.alloc(0);
    }
    return commit;
  };
}

/**
 * Reads the server's side from a message boundary on: each call takes the next chunk and says
 * whether a ReadyForQuery has begun in it (the server has finished answering: a COMMIT's
 * CommandComplete comes before it).
 */
export function readyForQueryWatcher(): (chunk: Buffer) => boolean {
  let header = Buffer.alloc(0);
  let remaining = 0;
  return (chunk) => {
    let offset = 0;
    while (offset < chunk.length) {
      if (remaining > 0) {
        const take = Math.min(remaining, chunk.length - offset);
        offset += take;
        remaining -= take;
        continue;
      }
      const take = Math.min(5 - header.length, chunk.length - offset);
      header = Buffer.concat([header, chunk.subarray(offset, offset + take)]);
      offset += take;
      if (header.length < 5) break;
      if (header[0] === READY_FOR_QUERY) return true;
      remaining = header.readInt32BE(1) - 4;
      header = Buffer.alloc(0);
    }
    return false;
  };
}
