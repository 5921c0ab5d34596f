"""The parent <-> worker protocol of a local launch, readable in one package.

``popen`` is the parent's half: the guarded command line, the bytes it writes
(``send_start_data``), the early-error pipe it reads (``early_failure``) and
the four Process variants (multiprocessing or multiprocess, spawn or warm).
``child`` is the worker's half: it reads those bytes, runs the stages and
answers on the report pipe.  ``messages`` is what travels back.  One rank of a
spawned launch, top to bottom in time (``==>`` bytes, ``-->`` one message)::

  PARENT  launch/launcher.py, protocol/popen.py      CHILD  protocol/child.py, one per rank
  -------------------------------------------------  -----------------------------------------
  spawn_with_plugins(entry, payload)
    build_spec(): template spec, payload captured
    get_launch_context(): Process class (+ server)
    WorkerGroup; per rank: 3 pipes, spec.replace(
      rank, report_conn, death_conn, fault_conn)
    LaunchContext.process(spec).start()
      GuardedSpawnPopen._launch():
        os.pipe() early-error pipe, spawn pipe
        python -c "<prologue> spawn_main_reporting
                   (package, early_fd, pipe_handle)"  1 prologue: guard.arm(), enter_worker()
        spawn pipe ==> preparation data ============> 2 spawn_main_reporting(): spawn_main
                   ==> Process(child_main, (spec,)) ==>   re-imports __main__ (__mp_main__),
                       (send_start_data: never blocks)    unpickles the Process and its spec
        early_failure() <== failure record ==========    any exception up to here, then exit
                                                      3 child_main(spec): faulthandler armed
                                                        on the fault pipe
  report pipe (one per rank) <-- HELLO(pid, host, dump_signal, marks)
                                                      4 Bootstrapper(spec, _Reporter).run():
                                                        gc.freeze() (the heap so far); no
                                                        automatic collection until the
                                                        entry's imports are done, then
                             <-- STAGE_STARTED(s), STAGE_FINISHED(s, seconds) for s in
                                   arm_parent_death      (starts watching the death pipe)
                                   initialize_platform
                                   load_plugins
                                   apply_hooks           (then gc.freeze() again)
                                   materialize_payload   (the payload unpickled)
                                   resolve_entry         (then gc.freeze(), collector on)
                             <-- READY(report)
                             <-- STAGE_STARTED(entry)
                                                      5 entry(payload)
                             <-- STAGE_FINISHED(entry), RESULT(data or error)   it returned
                              or FAILED(stage, type, message, traceback, exc bytes)  it raised
                              or EXITED(stage, code, traceback)  sys.exit(), unless 0 after READY
  fault pipe   <== faulthandler text (fatal signal; stacks on HELLO's dump_signal at a ready
                    timeout: SIGUSR1, or SIGUSR2 where the process handles SIGUSR1 itself)
  death pipe   never written: the launcher's copy closes when it dies -> the worker ends itself
  sentinel     EOF when the process has exited; then its exit code

Order, and who relies on it.  The child sends HELLO first, one STAGE_STARTED and
STAGE_FINISHED per stage in ``STAGES`` order (``Bootstrapper`` refuses any other
order), READY once after ``resolve_entry``, and at most one of RESULT, FAILED,
EXITED last, always before it exits.  The launcher's ``WorkerGroup`` assumes it:
it drains a rank's report pipe before handling its exit (a FAILED is the root
cause of the exit that follows), keeps the first FAILED or EXITED, treats an exit
without READY as a failure, and uses the early-error text only for a rank that
never said HELLO.  The child's ``_Reporter`` trusts a failure's own ``stage`` only
before READY (after it, the stage is the entry).

Warm start (``start_method="forkserver"``): one server per key, started once
by ``get_launch_context``; its handle is ``protocol/warm.py``, its main
``protocol/warm_main.py``, and it speaks the same messages on its status pipe::

  WarmServer.start()  python -c "serve(...)"    warm_main.serve(): arm_guard() first,
    boot pipe    ==> shared spec (no payload,       prebootstrap: initialize_platform,
                     no run id; send_start_data)    load_plugins, apply_hooks; preloads;
    status pipe  <-- STAGE_STARTED/FINISHED per     fork-safety checks; gc.freeze(); the
                     stage, plugin, preload; then   fork loop (_fork_loop: the package's
                     READY, FAILED (its typed refusal inside) or EXITED
                                                    protocol; spares forked while idle)
    fault pipe   <== faulthandler text (a hang at start)
    alive pipe   never written; closed: stop serving
  per rank: WarmPopen._launch()
    socket       ==> the new worker's fds (data pipe, sentinel, alive, tracker,
                     report/death/fault ends)        a spare takes them
                                                     (SCM_RIGHTS), else fork
    sentinel     <== the worker's pid; its exit status when it ends
                                                     known pipe <== the server's byte once
                                                     the pid is written, read before the
                                                     target (_known.target_next): at
                                                     EOF (server gone) it exits instead
    data pipe    ==> preparation data + Process, the same bytes as spawn's
                                                     forked worker: 2 (stdlib spawn._main),
                                                     then 3-5 without the shared stages
                                                     (no STAGE_* for them; the report
                                                     names the server)

A warm worker has an early-error pipe too (its first inherited descriptor;
the server's fork loop reports through it).  Both carry one pickled failure
record, so the parent's ``child_exception`` is the original exception.
``context_process`` holds the Process classes of a bootstrapping context
(``spawnkit.get_context``), which start through the same Popens.

Nothing is imported here: the child's first statement imports
``spawnkit.bootstrap.guard`` and then ``spawnkit.protocol.child``, and must not
pay for the parent's half.
"""
