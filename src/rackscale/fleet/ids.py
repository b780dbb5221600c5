"""The grammar of component ids, in one place: `region/rack/tray/part` (docs/architecture.md).

Rooms that hold only ids (a report document, an API response, a faults file's targets) ask
here, not by slicing strings of their own. These functions read the path alone; a leaf or
spine (`us-east/leaf-rail5-0`) has as many segments as a rack, so where an id may name a fabric
part, ask `Topology.holder` (or `Topology.rack_id`), which knows what each id is.
"""

from __future__ import annotations


def is_within(cid: str, scope: str) -> bool:
    """Whether `cid` is `scope` or a part under it (`us-east/r03/c07/gpu2` is within
    `us-east/r03`; `us-east/r030` is not)."""
    return cid == scope or cid.startswith(scope + "/")


def id_name(cid: str) -> str:
    """The last segment of an id: `c07` of `us-east/r03/c07`, the region of a region."""
    return cid.rsplit("/", 1)[-1]


def parent_id(cid: str) -> str:
    """The id one level up (`us-east/r03` of `us-east/r03/c07`); a region is its own."""
    return cid.rpartition("/")[0] or cid


def rack_path(cid: str) -> str | None:
    """The rack of an id known to be a rack or a part inside one (`region/rack/...`), None
    for a region. A leaf or spine gives itself: see the module doc."""
    parts = cid.split("/", 2)
    return "/".join(parts[:2]) if len(parts) >= 2 else None


def path_below_rack(cid: str) -> str:
    """The path of a part under its rack (`c07/gpu2` of `us-east/r03/c07/gpu2`), "" for the
    rack itself or anything above it."""
    parts = cid.split("/", 2)
    return parts[2] if len(parts) == 3 else ""
