/*
 * Writing a dead letter: shared/dead-letters/write-dead-letter.ts (writeDeadLetter) through
 * shared/db/queries/insert-dead-letter.ts (insertDeadLetter). The caller's locals `kind`, `res`,
 * `k` and `tries` carry the write; `check` is the draft's checkFence, `old` whether the copy is
 * older than its fence's lifetime (the drain's), `sender` an undelivered row's sending consumer.
 */
#define R_NONE 0
#define R_WRITTEN 1      /* a new pending row */
#define R_MERGED 2       /* the pending row of this key already recorded it (created: false) */
#define R_APPLIED 3      /* the job's fence has this body: applied after all, nothing written */
#define R_FAILED 4       /* DeadLetterRaceError: the record stays in its queue */
#define R_CONFLICTING 5  /* the INSERT met a pending row of its key (ON CONFLICT DO NOTHING) */

/* k := a pending row with the key of (job, body), or MAXD when there is none */
inline find_pending(job, body) {
  k = 0;
  do
  :: k < MAXD && !(d_status[k] == PENDING && SAME_KEY(k, job, body)) -> k++
  :: k < MAXD && d_status[k] == PENDING && SAME_KEY(k, job, body) -> break
  :: k >= MAXD -> break
  od
}

inline dl_write(job, body, check, old, sender) {
  tries = 0;
  res = R_NONE;
  do
  :: res == R_NONE ->
     /* INSERT … WITH held AS (core.hold_fence) … ON CONFLICT DO NOTHING: one statement, autocommit */
     d_step {
#ifndef W3
       /* hold_fence locks the job's fence FOR KEY SHARE: waits while the cleanup holds it */
       !f_clean[job] ->
#endif
       if
       :: check && f_fp[job] == body -> res = R_APPLIED
       :: else ->
          if
          :: check && f_fp[job] != 0 && f_fp[job] != body -> kind = K_CONFLICT
          :: else
          fi;
#ifndef W5_DRAIN
          /* a drained or undelivered copy older than its fence's lifetime whose fence is gone is
             recorded `outlived` (the dead letters' BEFORE INSERT trigger, the fence locked) */
          if
          :: (kind == K_UNRECORDED || kind == K_UNDELIVERED) && old && f_fp[job] == 0 -> kind = K_OUTLIVED
          :: else
          fi;
#endif
          find_pending(job, body);
          if
          :: k == MAXD -> new_row(job, body, kind, sender); res = R_WRITTEN
          :: else -> res = R_CONFLICTING
          fi
       fi
     }
     if
     :: res == R_CONFLICTING ->
        /* FIND_PENDING, a statement of its own */
        d_step {
#ifndef W4
          /* FOR SHARE: waits for a replay, bulk chunk or discard holding the row FOR UPDATE */
          !d_lock[k] ->
#endif
          if
          :: d_status[k] == PENDING -> res = R_MERGED
          :: else -> tries++; res = (tries >= 3 -> R_FAILED : R_NONE)
          fi
        }
     :: else
     fi
  :: res != R_NONE -> break
  od;
  k = 0; tries = 0
}
