"""A run's lifecycle on the workstation side, one verb per module.

::

    submit ──► place ──► reconcile: the run's owner pulls ──► (ended) ──► retry ──► place again
                          ▲        │      │                          │
                          │        │      └─► follow (tails the log cache)   └─► release
                          │        └─► refresh (`tcl ps`: runs nobody owns)
                          └─ stop (any time: stop; the owner drains the last events, releases)

- :mod:`.submit`: snapshot the code, record the run, hand it to placement; ``relaunch``
  places a stored run again as its next attempt (same run id); ``dry_run``.
- :mod:`.place`: the solver's request, then launch on each plan in order (the next on
  ``no_capacity``) and record the run started; where a relaunch may go.
- :mod:`.pull`: one pull of new events from every node into the local log cache, and what it
  learns moves the run on (its end, a requeue, a multi-node watchdog stop, a lost host placed
  again).
  ``ResumingPull`` survives dropped connections.
- :mod:`.reconcile`: the run controller: one owner per placed run (a lease in the store), which
  pulls it until it ended and its host is freed, followed or not.
- :mod:`.follow`: a reader: kept events, then each one the run's owner keeps, until it ended.
- :mod:`.refresh`: runs' states brought up to date, one batched status call per backend.
- :mod:`.stop`: stop the job on every node, keep its last logs, free what it holds.
- :mod:`.retry`: a run's end under its retry policy (back to ``queued``), and placing a run
  that waits for its retry again.
- :mod:`.retry_policy`: the pure policy (``RetryPolicy``, ``decide``): no I/O.
- :mod:`.release`: free what an attempt holds on its host once every event is kept.
- :mod:`.placinglease`: the lease a submit holds on its run while it places it.
- :mod:`.adopt`: a placement whose placer died: followed when its job started, else undone.
- :mod:`.orphans`: the orphan sweep: tasks on hosts that no attempt names, ended.

Who calls them today: the CLI (``tcl submit``, ``tcl ps`` → refresh, ``tcl stop``, ``tcl repl``,
``tcl matrix``), ``tcl logs -f`` (:mod:`tcl.cli.follow` → follow), the ``tcl serve`` daemon's
submit and follow streams (:mod:`tcl.control.daemon.app`), the dashboard's feeds and stop
(:mod:`tcl.ui`), ``@tcl.remote`` sessions (:mod:`tcl.remote.tclsession`), the log catch-up
(:mod:`tcl.control.catchup` → pull) and the sweep scheduler (:mod:`tcl.control.sweep.scheduler`:
follow, release, retry, stop, relaunch). A run that is placed and not a sweep's is advanced by
its controller only (:mod:`.reconcile`): follows, ``tcl ps`` and ``tcl logs`` read what it
keeps. The sweep scheduler's runs are next.

Nothing is re-exported here: import each verb from its module.
"""
