"""Fault tools that the demo, `tenure chaos`, the tests and the benchmarks share: a TCP proxy
that can cut and restore a connection (`proxy`), and worker processes that can be killed and
paused (`process`). Real processes and real sockets: faults are never flags inside the code
under test. And a clock a test moves (`clock.FakeClock`), for a worker's long deadlines."""
