"""Whether any configured host could ever offer a chip type: a sweep asking for one that no host
has is refused at ``tcl matrix add``, with what each host has (it would otherwise wait in its
queue for ever, with no reason in ``matrix status``).

A host's chips are known from its config (``chips:``) or, for a shim host that answers, from
its own report. A host that cannot tell now (unreachable, or a scheduler's host whose chips the
config does not list) may have it: then nothing is refused.
"""

from __future__ import annotations

from tcl.control.service import Control

CHECK_TIMEOUT_S = 20.0


async def hosts_lacking(ctl: Control, chip: str, pin: str | None = None) -> list[str] | None:
    """One line per host (of ``pin``, a host or a cluster, when given) saying what it has, when
    none of them has ``chip``; None when some host has it, or may have it."""
    lines: list[str] = []
    for st in await ctl.host_statuses(check=True, timeout_s=CHECK_TIMEOUT_S):
        host = ctl.cfg.hosts[st.name]
        if pin is not None and pin not in (st.name, host.cluster):
            continue
        configured = host.chips
        if configured:
            if chip in configured:
                return None
            lines.append(f"{st.name}: chips {', '.join(sorted(configured))} (configured)")
            continue
        accelerators = getattr(st.info, "accelerators", None)
        if not st.reachable or not isinstance(accelerators, list):
            return None  # it cannot say now: it may
        chips = sorted({a.chip for a in accelerators})
        if chip in chips:
            return None
        lines.append(f"{st.name}: {', '.join(chips) or 'no accelerators'}")
    return lines
