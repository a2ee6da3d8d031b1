/*
 * The operator's decisions on dead letters: shared/dead-letters/replay.ts (replayDeadLetter,
 * discardDeadLetter, replayDecision) and the bulk worker's chunk (shared/dead-letters/bulk-worker.ts,
 * runClaimedChunk). Each decision locks its rows FOR UPDATE until it commits.
 */
/* The bulk chunks and the discard; a scenario that needs only the single replay (ONLY_REPLAY) leaves
   them out, since they send and resolve a row as it does. */
#ifdef ONLY_REPLAY
#define MORE_OPS false
#else
#define MORE_OPS true
#endif

#define DEC_REFUSE 1
#define DEC_SEND 2
#define DEC_SUPERSEDED 3

/*
 * A replay's send of row i (replayMessage, shared/dead-letters/replay-message.ts). On a FIFO queue
 * SQS drops a message whose deduplication id it took within five minutes, and reports it sent.
 * A replay attempt's id is the dead letter's id and a fresh nonce (replayDeduplicationId,
 * shared/producer/fifo-ids.ts), so it never equals an earlier attempt's.
 */
#ifdef W7
/* W7, a FIFO replay retried after a lost answer: the id is `replay-<dead letter id>`, the same for
   every attempt, so a retry within the window is dropped */
#define SAME_DEDUP_ID(i) (r_sent & BIT(i))
#else
#define SAME_DEDUP_ID(i) false
#endif
inline replay_send(i) {
  if
  :: r_sent & BIT(i) -> resent = 1
  :: else
  fi;
  if
  :: SAME_DEDUP_ID(i) -> skip   /* dropped as a duplicate: no message, and no error */
  :: else -> new_copy(d_job[i], d_body[i])
  fi;
#if MAXLOSTSEND > 0
  /* only a lost answer retries an attempt (a crash ends the operator): elsewhere this stays 0 */
  r_sent = r_sent | BIT(i)
#else
  skip
#endif
}

/* replayDecision, plus the refusals of the fixed protocol */
inline replay_decision(i) {
  if
#ifndef W5_DRAIN
  :: d_kind[i] == K_OUTLIVED -> dec = DEC_REFUSE            /* a copy that outlived its fence */
#endif
#ifndef W6
  :: d_kind[i] == K_UNDELIVERED && !DECLARED(d_sender[i], d_job[i]) -> dec = DEC_REFUSE  /* provenance */
#endif
  :: else ->
     if
     :: f_fp[d_job[i]] == 0 -> dec = DEC_SEND
     :: f_fp[d_job[i]] != 0 && f_fp[d_job[i]] == d_body[i] -> dec = DEC_SUPERSEDED
     :: f_fp[d_job[i]] != 0 && f_fp[d_job[i]] != d_body[i] -> dec = DEC_REFUSE   /* conflict */
     fi
  fi
}

proctype operator() {
  byte i, dec, ops, bm, bsend, bsup;
end_idle:
  do
  :: /* single replay: lock → fence → send → mark replayed → COMMIT */
     atomic { ops < MAXOPS && ANY_REPLAYABLE -> ops++; PICK5(i, REPLAYABLE); d_lock[i] = 1 };
     CRASHPOINT;
     d_step {
       replay_decision(i);
       if
       :: dec == DEC_SEND -> replay_send(i)
       :: dec == DEC_SUPERSEDED -> d_status[i] = SUPERSEDED; d_lock[i] = 0
       :: dec == DEC_REFUSE -> d_lock[i] = 0
       fi
     };
     if
#if MAXLOSTSEND > 0
     :: dec == DEC_SEND && lost_sends < MAXLOSTSEND ->
        /* SQS took the message but its answer is lost: the replay's transaction rolls back, the
           row stays pending (the copy is in the queue), and the operator tries again */
        d_step { lost_sends++; d_lock[i] = 0 }
#endif
     :: dec == DEC_SEND ->
        CRASHPOINT;
        d_step { d_status[i] = REPLAYED; d_lock[i] = 0 }
     :: else
     fi;
     i = 0; dec = 0
  :: /* a bulk replay chunk: lock the chunk's rows, send each, resolve them all, COMMIT */
     d_step {
       MORE_OPS && ops < MAXOPS && ANY_REPLAYABLE -> ops++;
       for (h_i : 0 .. MAXD - 1) {
         if
         :: REPLAYABLE(h_i) -> d_lock[h_i] = 1; bm = bm | BIT(h_i)
         :: else
         fi
       };
       h_i = 0
     };
     i = 0;
     do
     :: i < MAXD && (bm & BIT(i)) ->
        d_step {
          replay_decision(i);
          if
          :: dec == DEC_SEND -> replay_send(i); bsend = bsend | BIT(i)
          :: dec == DEC_SUPERSEDED -> bsup = bsup | BIT(i)   /* resolved at the commit */
          :: else
          fi;
          dec = 0; i++
        };
#if MAXLOSTSEND > 0
        if
        :: lost_sends < MAXLOSTSEND && (bsend & BIT(i - 1)) ->
           /* the send's answer is lost (sendReplays: TransientSendError): the chunk rolls back, its
              rows stay pending (the copy is in the queue), and the bulk worker runs it again */
           d_step {
             lost_sends++;
             for (h_i : 0 .. MAXD - 1) { d_lock[h_i] = 0 };
             h_i = 0; bm = 0; bsend = 0; bsup = 0; i = 0
           };
           goto end_idle
        :: else
        fi;
#endif
        CRASHPOINT
     :: i < MAXD && !(bm & BIT(i)) -> i++
     :: i >= MAXD -> break
     od;
     skip;
     d_step {
       for (h_i : 0 .. MAXD - 1) {
         if
         :: bsend & BIT(h_i) -> d_status[h_i] = REPLAYED; bulk_replayed = 1
         :: bsup & BIT(h_i) -> d_status[h_i] = SUPERSEDED
         :: else
         fi;
         d_lock[h_i] = 0
       };
       h_i = 0; bm = 0; bsend = 0; bsup = 0; i = 0
     }
  :: /* a bulk discard chunk: lock, then resolve at the COMMIT */
     d_step {
       MORE_OPS && ops < MAXOPS && ANY_REPLAYABLE -> ops++;
       for (h_i : 0 .. MAXD - 1) {
         if
         :: REPLAYABLE(h_i) -> d_lock[h_i] = 1; bm = bm | BIT(h_i)
         :: else
         fi
       };
       h_i = 0
     };
     CRASHPOINT;
     d_step {
       for (h_i : 0 .. MAXD - 1) {
         if
         :: bm & BIT(h_i) -> d_status[h_i] = DISCARDED; d_lock[h_i] = 0
         :: else
         fi
       };
       h_i = 0; bm = 0
     }
  :: /* discard: one UPDATE, which waits for a replay's lock */
     atomic { MORE_OPS && ops < MAXOPS && ANY_REPLAYABLE -> ops++; PICK5(i, REPLAYABLE); d_status[i] = DISCARDED; i = 0 }
  od;
crashed:
  /* the API's connection is gone: its transaction rolls back and its row locks go */
  skip;
  d_step {
    for (h_i : 0 .. MAXD - 1) { d_lock[h_i] = 0 };
    h_i = 0; i = 0; dec = 0; bm = 0; bsend = 0; bsup = 0
  }
}
