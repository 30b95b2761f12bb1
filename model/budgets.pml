/*
 * Spend budgets (tenure.budgets), as the code implements them: one budgeted run, two of its
 * jobs calling a paid tool in a loop, and a third job of a class that holds for its budget
 * while an operator raises it.
 *
 * One step is one statement or transaction. `report_cost` locks the chain's budget rows (FOR
 * UPDATE, in id order; SQLite's BEGIN IMMEDIATE), adds the call and commits; a report that
 * takes the run over fails its job. `raise_budget` locks the same rows, raises the ceiling,
 * releases the jobs it sees held (its UPDATE reads the jobs as of the statement's start, READ
 * COMMITTED), then commits. A worker that finds the run spent holds the job (`release` to a
 * far `run_after`), then `release_if_raised` locks the chain's rows, reads the ceilings and
 * releases the job if they changed since its look (a raise came) and the run has room.
 *
 * Checked (no assertion fails, in every interleaving):
 *   - the overspend bound: the calls made are at most the budget plus one call per job that
 *     was running when the run ran out (the test's `at most the number started x $0.10`);
 *   - no job is left held once a raise gave its spent run room (everyone done).
 * -DNO_CHAIN_LOCK models a report that reads what was spent and writes it back in two
 * statements: two reports at once lose one, and the calls go past the bound.
 * -DNO_RECHECK models the hold without `release_if_raised`: a raise that committed after the
 * worker looked, and whose release ran before the hold committed, leaves the job held.
 */

#define CALLERS 2
#define BUDGET  2

byte budget = BUDGET;  /* the run's ceiling, committed (calls) */
byte spent;            /* what the run spent, committed */
byte calls;            /* paid calls actually made */
bit  locked;           /* a transaction holds the chain's budget rows */
byte callers_done;

/* The hold race: the held job's run is spent (its own ceiling `hold_budget`, all spent). */
byte hold_budget = 1;
byte hold_spent = 1;
bit  held;
byte seen;             /* the ceiling the worker's look read */
bit  hold_done;
bit  raise_done;

inline lock()   { !locked -> locked = 1 }
inline unlock() { locked = 0 }

/* A job calling the paid tool until a report takes the run over (the test's `spend`). */
proctype Caller() {
  bit over;
  /* Its start: the chain read. A spent run starts no job. */
  if
  :: atomic { spent >= budget -> goto stopped }
  :: atomic { else -> skip }
  fi;
  do
  :: calls++;  /* the call: paid, in flight until reported */
#ifdef NO_CHAIN_LOCK
     byte read;
     read = spent;
     atomic { spent = read + 1; over = (spent > budget) }
#else
     atomic { lock(); spent++; over = (spent > budget); unlock() }
#endif
     if
     :: over -> break  /* BudgetExhausted: the job fails */
     :: else -> skip
     fi
  od;
stopped:
  atomic { callers_done++ }
}

/* A worker that looked, found the run spent, and holds the job (on_budget="hold"). */
proctype Holder() {
  if
  :: atomic { hold_spent < hold_budget -> goto ran }  /* the look: a raise came first */
  :: atomic { else -> seen = hold_budget }            /* the look: spent */
  fi;
  held = 1;                                           /* the hold's `release` commits */
#ifndef NO_RECHECK
  atomic {                             /* release_if_raised: the chain locked, read again */
    lock();
    if
    :: hold_budget != seen && hold_spent < hold_budget -> held = 0
    :: else -> skip
    fi;
    unlock()
  }
#endif
ran:
  hold_done = 1
}

/* The operator's raise of the held job's run, once. */
proctype Raise() {
  byte raised;
  atomic { lock(); raised = hold_budget + 1 }  /* raise_budget__rows, raise_budget */
  if                                           /* raise_budget__release: the held jobs it sees */
  :: held -> held = 0
  :: else -> skip
  fi;
  atomic { hold_budget = raised; unlock() }    /* commit */
  raise_done = 1
}

active proctype Checker() {
  atomic {
    callers_done == CALLERS && hold_done && raise_done ->
    assert(calls <= BUDGET + CALLERS);
    assert(!(held && hold_spent < hold_budget))
  }
}

init {
  atomic {
    byte n = 0;
    do
    :: n < CALLERS -> run Caller(); n++
    :: else -> break
    od;
    run Holder();
    run Raise()
  }
}
