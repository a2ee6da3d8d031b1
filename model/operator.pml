/*
 * The operator's decisions on dead letters: shared/dead-letters/replay.ts (replayDeadLetter,
 * discardDeadLetter, replayDecision) and the bulk worker's chunk (shared/dead-letters/bulk-worker.ts,
 * runClaimedChunk). Each decision locks its rows FOR UPDATE until it commits.
 */
#define DEC_REFUSE 1
#define DEC_SEND 2
#define DEC_SUPERSEDED 3

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
       :: dec == DEC_SEND -> new_copy(d_job[i], d_body[i])
       :: dec == DEC_SUPERSEDED -> d_status[i] = SUPERSEDED; d_lock[i] = 0
       :: dec == DEC_REFUSE -> d_lock[i] = 0
       fi
     };
     if
     :: dec == DEC_SEND ->
        CRASHPOINT;
        d_step { d_status[i] = REPLAYED; d_lock[i] = 0 }
     :: else
     fi;
     i = 0; dec = 0
  :: /* a bulk replay chunk: lock the chunk's rows, send each, resolve them all, COMMIT */
     d_step {
       ops < MAXOPS && ANY_REPLAYABLE -> ops++;
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
          :: dec == DEC_SEND -> new_copy(d_job[i], d_body[i]); bsend = bsend | BIT(i)
          :: dec == DEC_SUPERSEDED -> bsup = bsup | BIT(i)   /* resolved at the commit */
          :: else
          fi;
          dec = 0; i++
        };
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
       ops < MAXOPS && ANY_REPLAYABLE -> ops++;
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
     atomic { ops < MAXOPS && ANY_REPLAYABLE -> ops++; PICK5(i, REPLAYABLE); d_status[i] = DISCARDED; i = 0 }
  od;
crashed:
  /* the API's connection is gone: its transaction rolls back and its row locks go */
  skip;
  d_step {
    for (h_i : 0 .. MAXD - 1) { d_lock[h_i] = 0 };
    h_i = 0; i = 0; dec = 0; bm = 0; bsend = 0; bsup = 0
  }
}
