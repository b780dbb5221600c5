"""Component kinds: the words every room uses for what a component is (docs/architecture.md)."""

REGION, RACK = "region", "rack"
COMPUTE_TRAY, NODE, SWITCH_TRAY, NVSWITCH = "compute_tray", "node", "switch_tray", "nvswitch"
GPU, CPU, NIC, DPU = "gpu", "cpu", "nic", "dpu"
CDU, POWER_SHELF, LEAF, SPINE = "cdu", "power_shelf", "leaf", "spine"
KINDS = (REGION, RACK, COMPUTE_TRAY, NODE, SWITCH_TRAY, NVSWITCH, GPU, CPU, NIC, DPU, CDU,
         POWER_SHELF, LEAF, SPINE)

# Where a part of each kind sits, for `Topology.holder`: inside a tray or node (its faults take
# that tray out), on the rack itself (shared by every tray of the rack), in the shared
# scale-out fabric, or the region.
TRAY_KINDS = frozenset({COMPUTE_TRAY, NODE})
IN_TRAY_KINDS = frozenset({GPU, CPU, NIC, DPU, NVSWITCH})
RACK_LEVEL_KINDS = frozenset({RACK, SWITCH_TRAY, CDU, POWER_SHELF})
FABRIC_KINDS = frozenset({LEAF, SPINE})
