"""bench/issue29.py finds each row's figure in what its benchmark prints (the lines below are
those benchmarks' own print formats, filled in)."""

from __future__ import annotations

from bench.issue29 import ROWS, figures_of

PRINTED = {
    "local": "ratio tcl/baseline: 23.40 (target <= 10)\n"
    "submit's CLI-side overhead: 41 ms (target <= 100 ms)\n",
    "ssh-process": "ratio tcl/baseline: 1.91 (target <= 1.5)\n",
    "ssh-docker": "ratio tcl/baseline: 1.57 (target <= 1.3)\n",
    "slurm": "tcl submit: median 2.1 s\nratio 3.83 (target <= 1.5)\n",
    "gap": "gap p50: tcl 0.175 s vs baseline 0.012 s; p99: tcl 0.4 s vs baseline 0.02 s\n"
    "ratio tcl/baseline (p50): 14.6x\n",
    "drain": "ratio tcl/bare-loop drain: 1.73\n",
    "claims": "tcl sqlite:            1000 claims in    2.00 s =     500.0 entries/s; double "
    "claims 0; ratio tcl/flock    61.2x (target >= 50x)\n"
    "tcl postgresql:        1000 claims in    1.00 s =    1000.0 entries/s; double claims 0; "
    "ratio tcl/flock   122.4x (target >= 50x)\n",
    "ship": "ratio second/first: 0.156 (target <= 0.1)\n"
    "ratio first submit / copy over ssh: 2.60 (target <= 1.5)\n",
    "logs": "latency tcl submit: p50 4.10 ms  p99 12.30 ms  (300 lines)\n"
    "latency ssh:        p50 0.35 ms  p99 2.30 ms  (300 lines)\n"
    "ratio throughput tcl/ssh: 0.28  (goal >= 0.9)\n",
    "version": "ratio tcl --version / python -c pass: 1.21 (target <= 1.5)\n",
}


def test_every_figure_of_every_row_is_found() -> None:
    assert sorted(PRINTED) == sorted(r.key for r in ROWS)
    for row in ROWS:
        found = figures_of(row, PRINTED[row.key])
        assert sorted(found) == sorted(f.what for f in row.figures), row.key
    logs = next(r for r in ROWS if r.key == "logs")
    assert list(figures_of(logs, PRINTED["logs"]).values()) == [0.28, 4.10, 12.30]
    claims = next(r for r in ROWS if r.key == "claims")
    assert list(figures_of(claims, PRINTED["claims"]).values()) == [61.2, 122.4]
