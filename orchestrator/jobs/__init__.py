"""Background shell jobs: ``.team/jobs/<id>.json`` + ``<id>.log``.

    manager.py  JobManager: start, watch, kill and list jobs
    watcher.py  the epoll loop over job exits, timeouts and deferred file work
    spawn.py    a job's process: spawn in its own session, its exit fd
    records.py  JobRecord and Notification, what a job leaves on disk
    files.py    log files and record writes, kept off the start path
    orphans.py  jobs this manager does not watch: killed elsewhere, or orphaned
    server.py   ``team run``'s job server process (or the manager in-process)
"""
