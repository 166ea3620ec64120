"""How many entries a scheduler claims now.

While placements succeed, as many as it has room to place at once. Once one is refused (nothing
free for it: the cluster is full), claiming everything again would place nothing and only churn
claims and solver probes; so it claims as many entries as its runs that ended since (each
freed what it held), plus one probe per ``full_wait_s`` (capacity freed by someone else), plus
credits that double with each success of a probe or of what a probe earned (a cluster that has
room again is filled in a few rounds). An entry placed in a slot its own runs freed earns
nothing: it says nothing of more room (each such success used to earn two more claims, both
refused once the cluster was full again: two runs made and deleted per run placed).
"""

from __future__ import annotations


class Admission:
    def __init__(self, room: int, full_wait_s: float) -> None:
        self.room = room
        self.full_wait_s = full_wait_s
        self.full = False
        self.freed = 0  # while full: runs that ended since the last claim (each freed a slot)
        self.granted = 0  # while full: entries probes and their successes earned
        self._granted_out = 0  # while full: claims of granted credits not yet placed or refused
        self._grant = 1  # what the next success earns while full (doubles)
        self._probe_at = 0.0  # while full: when a probe is allowed again

    @property
    def credits(self) -> int:
        return self.freed + self.granted

    def limit(self, placing: int, now: float) -> int:
        room = max(0, self.room - placing)
        if not self.full:
            return room
        if self.credits == 0 and now >= self._probe_at:
            self.granted = 1
            self._probe_at = now + self.full_wait_s
        return min(room, self.credits)

    def took(self, claimed: int) -> None:
        from_freed = min(self.freed, claimed)
        self.freed -= from_freed
        from_granted = min(self.granted, claimed - from_freed)
        self.granted -= from_granted
        self._granted_out += from_granted

    def run_ended(self) -> None:
        if self.full:
            self.freed += 1

    def placed(self) -> None:
        if not self.full or self._granted_out == 0:
            return  # not full, or a freed slot taken again: no news of more room
        self._granted_out -= 1
        self._grant = min(self.room, self._grant * 2)
        self.granted += self._grant
        if self._grant >= self.room:
            self.full = False  # it keeps succeeding: claim freely again

    def refused(self, now: float) -> None:
        """Something claimed found nothing free. Runs that ended since keep their claims (it
        was claimed before they freed anything)."""
        self.full = True
        self.granted = 0
        self._granted_out = 0
        self._grant = 1
        self._probe_at = now + self.full_wait_s

    def wait_s(self, now: float) -> float:
        """How long the loop may sleep when nothing wakes it."""
        if not self.full:
            return 0.5
        return max(0.05, min(self.full_wait_s, self._probe_at - now))
