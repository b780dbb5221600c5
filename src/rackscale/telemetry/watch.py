"""One scrape of a fleet's exporters, written once: `telemetry scrape`, `telemetry watch` and
the server's watch (`serve --dcgm`) all call `scrape_sources`, and `Watch` is the bounded loop
that the server runs beside its API.

The hot-rack rule asks whether the lifecycle's coolant response already has a rack; the
lifecycle sits on this room's floor (neither imports the other), so the caller passes that
question in (`Cooling`): the CLI and the server give the lifecycle's answer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rackscale.errors import UserError
from rackscale.fleet import Topology
from rackscale.state import FleetState
from rackscale.store import Store
from rackscale.telemetry.dcgm import parse_page, read_source
from rackscale.telemetry.evaluate import node_hosts, read_hosts
from rackscale.telemetry.record import ScrapeReport, scrape

log = logging.getLogger("rackscale.telemetry")

# racks -> the coolant response the lifecycle has on each (rack -> what it says)
Cooling = Callable[[set[str]], Mapping[str, Mapping[str, Any]]]


def scrape_sources(store: Store, topo: Topology, sources: Sequence[str],
                   hosts_file: str | None, cooling: Cooling,
                   state: FleetState | None = None) -> ScrapeReport:
    """Read every exporter page in `sources` (URLs or files) and record what is new."""
    pages = [parse_page(read_source(src), src) for src in sources]
    hosts = read_hosts(hosts_file, topo) if hosts_file else node_hosts(topo)
    return scrape(store, topo, pages, hosts=hosts,
                  cooling=cooling({r.id for r in topo.racks}), state=state)


@dataclass
class Watch:
    """Scrape every `every_s` seconds on a thread of its own until `stop()`. Each scrape's
    report, or the error that stopped it (a page that did not load or parse), is kept for the
    server to show; an error is logged and the next scrape tries again."""

    store: Store
    topo: Topology
    sources: Sequence[str]
    every_s: float
    cooling: Cooling
    hosts_file: str | None = None
    last: ScrapeReport | None = None
    last_error: str | None = None
    scrapes: int = 0
    errors: int = 0
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError("a telemetry watch needs at least one exporter page")
        if not 1.0 <= self.every_s <= 86400.0:
            raise ValueError(f"telemetry every {self.every_s} s: give 1..86400 seconds")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="telemetry-watch", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def once(self, state: FleetState | None = None) -> None:
        try:
            self.last = scrape_sources(self.store, self.topo, self.sources, self.hosts_file,
                                       self.cooling, state)
            self.last_error = None
            self.scrapes += 1
        except (UserError, OSError) as err:  # kept, logged, shown: a bad page must not end it
            self.errors += 1
            self.last_error = f"{type(err).__name__}: {err}"
            log.warning("telemetry scrape failed: %s", self.last_error)

    def _loop(self) -> None:
        state = FleetState(self.topo)  # kept: each scrape reads only what is new
        while not self._stop.is_set():
            started = time.monotonic()
            self.once(state)
            self._stop.wait(max(0.0, self.every_s - (time.monotonic() - started)))

    def status(self) -> dict[str, Any]:
        return {"sources": list(self.sources), "every_s": self.every_s,
                "scrapes": self.scrapes, "errors": self.errors, "last_error": self.last_error,
                "last": None if self.last is None else self.last.as_dict()}
