/*
 * The backstop drain: shared/backstop/drain.ts (createBackstopDrain's `unrecorded` record path):
 * every message it receives becomes one dead letter, whether or not the job's fence exists.
 */
proctype drain() {
  byte c, j, b, kind, res, k, tries;
end_idle:
  do
  :: atomic { PICK5(c, IS_BACKSTOP); c_where[c] = BFLIGHT; j = c_job[c]; b = c_body[c] };
     CRASHPOINT;
     kind = K_UNRECORDED;
     dl_write(j, b, 0, c_old[c], 0);
     if
     :: res == R_FAILED -> goto crashed
     :: else
     fi;
     CRASHPOINT;
     d_step { c_where[c] = GONE; c = 0; j = 0; b = 0; kind = 0; res = 0 };
     goto end_idle;
crashed:
     skip;
     d_step { c_where[c] = BACKSTOP; c = 0; j = 0; b = 0; kind = 0; res = 0 }
  od
}
