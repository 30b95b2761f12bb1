/*
 * A wait for several signals (`ctx.wait_for_all`), as the code implements it: the job's row
 * keeps the names still to come (`wait.pending`); the `signal` statement stores its signal and,
 * under the row's lock, drops its own name and wakes the job when it was the last. The wait
 * (`wait__lock`, `wait__signal`, `wait__settle` / `wait__suspend`) locks the row, reads the
 * stored signals and settles, or suspends with `pending` = the names it did not find.
 *
 * One step is one statement or transaction holding the job's row lock (PostgreSQL's row lock
 * held to commit, SQLite's BEGIN IMMEDIATE); a PostgreSQL UPDATE blocked on that lock reads
 * the row the holder committed (READ COMMITTED re-checks the newest version), but the other
 * tables as of its own snapshot, taken when the statement began.
 *
 * Checked (no assertion fails, no process is left blocked, in every interleaving):
 *   - a job waiting with every signal stored has been woken (no lost wake-up);
 *   - a job is woken only once every signal is stored (a partial answer wakes no one);
 *   - the handler resumes from the wait exactly once and gets both payloads.
 * -DSNAPSHOT models the design this replaces: the signal statement decides to wake the job
 * from `tenure_signals` as its snapshot shows it. Spin refutes it: two last signals sent at
 * once each miss the other, and the job waits forever (tests/integration/test_model.py).
 */

#define RUNNING 0
#define WAITING 1
#define DONE    2

byte st = RUNNING;   /* tenure_jobs.state of the job */
bit  pending[2];     /* wait.pending: the names still to come while it waits */
bit  woke;           /* run_after set to now: the next claim takes the job */
bit  stored[2];      /* tenure_signals (job, name) */
byte resumes;        /* claims of the job after its first suspend */
byte got;            /* the payloads the settled wait gave the handler */

inline check() {
  assert(!(st == WAITING && stored[0] && stored[1]) || woke);
  assert(!woke || (stored[0] && stored[1]))
}

/* The worker: run the handler to its wait; settle it, or suspend and wait to be claimed. */
active proctype Worker() {
  do
  :: atomic {
       st == RUNNING ->
       if
       :: stored[0] && stored[1] -> got = 2; st = DONE; check(); break
       :: else ->
          pending[0] = !stored[0]; pending[1] = !stored[1];
          st = WAITING; check()
       fi
     }
     atomic { st == WAITING && woke -> st = RUNNING; woke = 0; resumes++; check() }
  od;
  assert(got == 2 && resumes <= 1)
}

/* The `signal` statement for name i, sent once, before the wait, during it, or both at once. */
proctype Signal(byte i) {
#ifdef SNAPSHOT
  bit other;
  other = stored[1 - i];  /* the statement's snapshot of tenure_signals */
  atomic {
    stored[i] = 1;
    if
    :: st == WAITING && other -> woke = 1
    :: else -> skip
    fi;
    check()
  }
#else
  atomic {
    stored[i] = 1;
    if
    :: st == WAITING && pending[i] ->
       if
       :: !pending[1 - i] -> woke = 1  /* it was the last name pending */
       :: else -> skip
       fi;
       pending[i] = 0
    :: else -> skip
    fi;
    check()
  }
#endif
}

init {
  atomic { run Signal(0); run Signal(1) }
}
