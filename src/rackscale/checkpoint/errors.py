"""Errors of the checkpoint room. Bad input and unreachable/unauthorised stores are UserErrors.

An operator who names an unknown checkpoint, points at an endpoint that does not answer or
gives wrong keys must get one clear sentence and exit code 2, with nothing deleted or half
written; that is why every store failure is translated into one of these at the store seam.
"""

from __future__ import annotations

from rackscale.errors import UserError


class CheckpointError(UserError):
    """Base of the room's operator-facing errors."""


class UnknownCheckpoint(CheckpointError):
    def __init__(self, ckpt_id: str, known: list[str]) -> None:
        shown = ", ".join(known[-10:]) if known else "none"
        super().__init__(f"unknown checkpoint {ckpt_id!r}: no committed manifest in any tier "
                         f"(known: {shown}). Run `rackscale checkpoint ls` to list them.")


class StoreUnreachable(CheckpointError):
    """The endpoint does not answer (connection refused, timeout, DNS)."""


class StoreAuthError(CheckpointError):
    """The store refused the credentials (wrong key, signature mismatch, access denied)."""


class ObjectMissing(CheckpointError):
    """A key that should exist is absent from a store."""


class AlreadyExists(CheckpointError):
    """A write-once key (a manifest) already exists: somebody committed it first."""


class ManifestInvalid(CheckpointError):
    """A manifest or `latest` pointer that does not parse, has a field of the wrong type, does
    not match its own checkpoint hash or its key: that tier's copy is not trusted."""


class IntegrityError(CheckpointError):
    """No tier holds a copy of a chunk whose hash matches the manifest."""


class ConfigError(CheckpointError):
    """A tiers config that does not validate; the message names the field and the fix."""


class AlreadyCommitted(AlreadyExists):
    """A save under an id that is already committed: refused before any byte is written.

    Built with `for_id` (the constructor takes the message alone, so the error pickles:
    DCP carries a rank's exception to every other rank)."""

    @classmethod
    def for_id(cls, ckpt_id: str, why: str) -> AlreadyCommitted:
        return cls(f"checkpoint {ckpt_id} already exists ({why}); a committed checkpoint is "
                   f"never overwritten. Save under a new step or id (a resumed job saves the "
                   f"step after the one it resumed from), or remove the old one first with "
                   f"`rackscale checkpoint gc`.")
