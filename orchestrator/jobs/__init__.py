"""Background shell jobs: ``.team/jobs/<id>.json`` + ``<id>.log``.

    manager.py  JobManager: start, kill and list jobs; the table of the jobs it
                runs and the owners' notifications; holds the collaborators below
    watcher.py  Watcher: the epoll loop over job exits, timeouts and deferred file
                work; reports each exit through the callback it was given
    spawn.py    a job's process: spawn in its own session, its exit fd and reap
                (WatchedJob)
    records.py  JobRecord and Notification, what a job leaves on disk;
                JobRecords, the records read (get/list) and saved
    files.py    JobFiles: log files and record writes, kept off the start path
    orphans.py  OrphanReaper: jobs this manager does not watch (killed elsewhere,
                or orphaned by a dead manager), from the records and /proc
    strays.py   Strays: what a job left outside its group (setsid, daemons), killed
                when the job ends (the job server is their subreaper)
    server.py   ``team run``'s job server process (or the manager in-process)

Who calls whom: ``JobManager.start`` → ``JobFiles.new_log``, ``spawn``,
``JobRecords.save``, ``Watcher.watch``; the watcher → ``WatchedJob.reap``, then
the manager's ``_on_exit(job, code)`` callback → ``JobRecords.save``;
``JobManager.kill`` of a job it does not run, ``reap_orphans`` and
``unrecorded_orphans`` → ``OrphanReaper`` → ``JobRecords``; the job server →
``JobManager.serve`` → ``Watcher.serve``, ``begin_kill`` → ``Watcher.terminate``.
"""
