"""Tiered checkpoint store: host memory -> local NVMe -> region object store -> other regions
-> archive, with per-chunk hashes, atomic manifests, resumable uploads, read-through restore
and retention. Imports nothing of rackscale but `rackscale.errors`.
"""

from rackscale.checkpoint.bench import run_all as run_benchmarks
from rackscale.checkpoint.choose import ResumePoint, resume_point
from rackscale.checkpoint.config import (
    Retention,
    StoreSpec,
    TiersConfig,
    default_config,
    for_job,
    load_config,
    parse_config,
)
from rackscale.checkpoint.demo import DemoCheckpoint, demo_checkpoint
from rackscale.checkpoint.errors import (
    AlreadyCommitted,
    AlreadyExists,
    CheckpointError,
    ConfigError,
    IntegrityError,
    ManifestInvalid,
    ObjectMissing,
    StoreAuthError,
    StoreUnreachable,
    UnknownCheckpoint,
)
from rackscale.checkpoint.importer import import_dcp
from rackscale.checkpoint.listing import catalog_of, listing_rows, tier_presence
from rackscale.checkpoint.manifest import CkptState, Manifest, ckpt_id_for
from rackscale.checkpoint.objectstore import LocalDirStore, ObjectInfo, ObjectStore
from rackscale.checkpoint.profile import (
    ProfileError,
    StorageProfile,
    fit_affine,
    load_profile,
    measure_profile,
    parse_profile,
    parse_size,
)
from rackscale.checkpoint.restore import Restorer, RestoreReport
from rackscale.checkpoint.retention import GcReport, gc
from rackscale.checkpoint.saver import CheckpointManager, SaveHandle, SaveReport
from rackscale.checkpoint.tiers import Tiers
from rackscale.lazy import lazy_exports

__all__ = [
    "AlreadyCommitted",
    "AlreadyExists",
    "CheckpointError",
    "CheckpointManager",
    "CkptState",
    "ConfigError",
    "DemoCheckpoint",
    "GcReport",
    "IntegrityError",
    "LocalDirStore",
    "Manifest",
    "ManifestInvalid",
    "ObjectInfo",
    "ObjectMissing",
    "ObjectStore",
    "ProfileError",
    "RestoreReport",
    "Restorer",
    "ResumePoint",
    "Retention",
    "SaveHandle",
    "SaveReport",
    "StorageProfile",
    "StoreAuthError",
    "StoreSpec",
    "StoreUnreachable",
    "TieredStorageReader",
    "TieredStorageWriter",
    "Tiers",
    "TiersConfig",
    "UnknownCheckpoint",
    "catalog_of",
    "ckpt_id_for",
    "default_config",
    "demo_checkpoint",
    "fit_affine",
    "for_job",
    "gc",
    "import_dcp",
    "listing_rows",
    "load_config",
    "load_profile",
    "measure_profile",
    "parse_config",
    "parse_profile",
    "parse_size",
    "resume_point",
    "run_benchmarks",
    "tier_presence",
]

_TORCH = {"TieredStorageReader", "TieredStorageWriter"}


# The DCP writer and reader need torch (an optional extra): imported on first use only.
__getattr__ = lazy_exports(__name__, dict.fromkeys(_TORCH, "dcp"), globals())
