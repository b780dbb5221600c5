"""The colours and basis labels of every page: report.html, its plots and the server's
dashboard read them here, so a state or a basis looks the same wherever it is shown.

Okabe-Ito based: tellable apart with the common colour-vision deficiencies. Each state and
basis carries the text colour that meets WCAG AA (4.5:1) on its background; a page never shows
a colour without its name beside it.
"""

from __future__ import annotations

from rackscale.provenance import BASIS_TEXT

# (background, text) per lifecycle state (racks and trays share the names that overlap).
# Degraded (serving with parts out) and draining (leaving service) differ: an operator must
# tell them apart at a glance.
STATE_STYLE: dict[str, tuple[str, str]] = {
    "production": ("#009e73", "#000"), "certified": ("#8fd9c1", "#000"),
    "burn_in": ("#56b4e9", "#000"), "firmware": ("#56b4e9", "#000"),
    "powered": ("#9dd1f0", "#000"), "onboard": ("#d4ebf8", "#000"),
    "seatrial": ("#9dd1f0", "#000"), "degraded": ("#f0e442", "#000"),
    "draining": ("#f5c27a", "#000"), "triage": ("#e69f00", "#000"),
    "repair": ("#d55e00", "#000"), "maintenance": ("#6b6b6b", "#fff"),
    "isolated": ("#cc79a7", "#000"), "rma": ("#882255", "#fff"), "retired": ("#333", "#fff"),
    "received": ("#eeeeee", "#000"), "cabled": ("#dddddd", "#000"),
    "cooling_verified": ("#c9e7b8", "#000"),
}
NO_STATE = ("#f4f4f4", "#000")

# (background, text) per basis of a figure; the plots draw the background colour.
BASIS_STYLE: dict[str, tuple[str, str]] = {
    "spec": ("#0072b2", "#fff"), "inventory": ("#56b4e9", "#000"),
    "measured": ("#009e73", "#000"), "simulated": ("#e69f00", "#000"),
    "recorded": ("#cc79a7", "#000"), "not_run": ("#bbbbbb", "#000"),
}
BASIS_COLORS: dict[str, str] = {k: bg for k, (bg, _fg) in BASIS_STYLE.items()}
UNKNOWN_BASIS = ("#868e96", "#000")
LOSS_COLOR = "#d55e00"  # GPUs a step drops (hatched in the plots)


def state_class(state: str | None) -> str:
    return f"s-{state}" if state in STATE_STYLE else "s-none"


def basis_class(basis: str | None) -> str:
    return f"b-{basis}" if basis in BASIS_STYLE else "b-unknown"


def state_css() -> str:
    """One class per state (`s-<state>`): a 1,778-rack map carries class names, not styles."""
    return "".join(f".s-{k}{{background:{bg};color:{fg}}}"
                   for k, (bg, fg) in STATE_STYLE.items()) + \
        f".s-none{{background:{NO_STATE[0]};color:{NO_STATE[1]}}}"


def basis_css() -> str:
    """One class per basis (`b-<basis>`), for labels and bars."""
    return "".join(f".b-{k}{{background:{bg};color:{fg}}}"
                   for k, (bg, fg) in BASIS_STYLE.items()) + \
        f".b-unknown{{background:{UNKNOWN_BASIS[0]};color:{UNKNOWN_BASIS[1]}}}"


def palette_css() -> str:
    return state_css() + basis_css()


__all__ = ["BASIS_COLORS", "BASIS_STYLE", "BASIS_TEXT", "LOSS_COLOR", "NO_STATE", "STATE_STYLE",
           "basis_class", "basis_css", "palette_css", "state_class", "state_css"]
