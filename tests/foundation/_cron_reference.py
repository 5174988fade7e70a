"""The cron search as it was before the near-transition search (a private reference).

``tests/foundation/test_cron_near_transitions.py`` checks that the library's search gives
exactly these occurrences. This is the reference algorithm of ``triggers.md`` §4.2 walking
matching wall times one croniter call at a time: slow within a day of a transition, but simple.
It uses the library's compiled fields and zone offsets, so only the search itself is compared.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trio_triggers._cron import _Compiled, _Zone

_S = 1000
_D = 86_400_000


def _resolve(zone: _Zone, w: int, every_hour: bool) -> list[int]:
    b = zone.off(w - _D)
    a = zone.off(w + _D)
    if a == b:
        return [w - b]
    kept = [w - o for o in (b, a) if zone.off(w - o) == o]
    if not kept:
        return [w - b]
    kept.sort()
    return kept if every_hour else kept[:1]


def reference_next(compiled: _Compiled, zone: _Zone, start: int) -> int | None:
    if zone.fixed:
        found = compiled.wall_next(start + zone.offset)
        return None if found is None else found - zone.offset
    off = zone.off
    w = start + min(off(start - _D), off(start), off(start + _D))
    best: int | None = None
    while True:
        found = compiled.wall_next(w)
        if found is None:
            return best
        w = found
        if best is not None and w - max(off(w - _D), off(w), off(w + _D)) >= best:
            return best
        for i in _resolve(zone, w, compiled.every_hour):
            if start < i and (best is None or i < best):
                best = i


def reference_previous(compiled: _Compiled, zone: _Zone, at: int) -> int | None:
    u = at // _S * _S
    if zone.fixed:
        found = compiled.wall_prev(u + zone.offset + _S)
        return None if found is None else found - zone.offset
    off = zone.off
    w = u + max(off(u - _D), off(u), off(u + _D)) + _S
    best: int | None = None
    while True:
        found = compiled.wall_prev(w)
        if found is None:
            return best
        w = found
        if best is not None and w - min(off(w - _D), off(w), off(w + _D)) <= best:
            return best
        for i in _resolve(zone, w, compiled.every_hour):
            if i <= u and (best is None or best < i):
                best = i
