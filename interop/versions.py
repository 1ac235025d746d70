"""Framework version ranges, read from where they are written once: the adapter distribution's
own requirements on its framework (`Requires-Dist` in its metadata, from pyproject.toml).

An adapter that depends on `jax>=0.4.35`, or offers `tensorflow-cpu>=2.16` as an extra, supports
exactly that range; the registry reports an installed framework outside it as `unsupported
version` instead of using it. Only the operators that describe a range are read (`>=`, `<`,
`==`, `~=`); others (`!=`, `>`, `<=`) are left to the installer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

Bounds = tuple[str | None, str | None]

_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*\(?([^;()]*)\)?")
_SPECIFIER = re.compile(r"^\s*(~=|==|>=|<)\s*([0-9][0-9A-Za-z.*+!_-]*)\s*$")


def release(version: str) -> tuple[int, ...]:
    """The numeric release part of a version ("2.13.0+cpu" -> (2, 13, 0))."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


def normalise(name: str) -> str:
    """A distribution name as packaging compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _next(parts: tuple[int, ...]) -> str:
    """The first release after every version starting with `parts` (1.9 -> 2.0 is not it:
    (1, 9) -> "1.10")."""
    return ".".join(map(str, (*parts[:-1], parts[-1] + 1)))


def _narrow(low: str | None, high: str | None, op: str, version: str) -> Bounds:
    lows: list[str] = [low] if low else []
    highs: list[str] = [high] if high else []
    if op == ">=":
        lows.append(version)
    elif op == "<":
        highs.append(version)
    elif op == "==" and version.endswith(".*"):
        lows.append(version[:-2])
        highs.append(_next(release(version[:-2])))
    elif op == "==":
        lows.append(version)
        highs.append(_next(release(version)))
    else:  # "~=": compatible release, ~=2.2 means >=2.2,<3 and ~=1.4.5 means >=1.4.5,<1.5
        lows.append(version)
        highs.append(_next(release(version)[:-1] or (0,)))
    return (max(lows, key=release) if lows else None, min(highs, key=release) if highs else None)


def bounds(requirement: str) -> tuple[str, Bounds]:
    """(normalised distribution name, (lowest included, highest excluded)) of one requirement
    string such as ``tensorflow-cpu>=2.16,<3; extra == "cpu"``."""
    match = _REQUIREMENT.match(requirement)
    if match is None:
        return "", (None, None)
    low: str | None = None
    high: str | None = None
    for spec in filter(str.strip, match.group(2).split(",")):
        found = _SPECIFIER.match(spec)
        if found:
            low, high = _narrow(low, high, found.group(1), found.group(2))
    return normalise(match.group(1)), (low, high)


def framework_bounds(
    requires: Iterable[str] | None, distributions: Iterable[str], installed: str | None = None
) -> Bounds | None:
    """The range an adapter distribution requires of its framework: from the requirement
    naming the installed framework distribution, else the first naming any of
    `distributions`; None when no requirement names the framework."""
    wanted = [normalise(d) for d in distributions]
    found: dict[str, Bounds] = {}
    for requirement in requires or ():
        name, range_ = bounds(requirement)
        if name in wanted and name not in found:
            found[name] = range_
    if installed is not None and normalise(installed) in found:
        return found[normalise(installed)]
    for name in wanted:
        if name in found:
            return found[name]
    return None
