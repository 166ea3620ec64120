"""``tcl ui``: a local dashboard of runs, logs, metrics, sweeps and hosts, served on loopback.

::

    server.py     uvicorn on 127.0.0.1, a fresh token, the URL printed first
    app.py        the app factory: page, static files, routers, errors mapped to HTTP once
    guard.py      Host / Origin / token checks before any route
    context.py    what routes share: store, sweep queue, metric rows, SSH pool, settings
    api.py        the wire schema the page reads
    runs.py       /api/runs: list, one run, metrics, stop
    logstream.py  WS /api/runs/{id}/logs: kept then live events
    matrices.py   /api/matrices: list, one sweep's grid, requeue
    hosts.py      /api/hosts: what each host offers now
    static/       index.html, app.js, app.css, vendor/uplot (no build step, no CDN)
"""
