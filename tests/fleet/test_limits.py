"""Inventory ids are unique by construction; names, sizes and types are checked; files capped.

Each case here used to be accepted (and then lost racks, hung, or raised a traceback).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rackscale.fleet import RACK, SpecError, Topology, load_fleet, parse_fleet
from rackscale.fleet.spec import DEFAULT_MAX_GPUS, MAX_RACKS_PER_GROUP
from rackscale.inputs import MAX_ALIAS_VALUES, MAX_FILE_BYTES, InputError, load_yaml_data
from rackscale.store import Store, load_topology


def spec(racks: str, *, name: str = "lab", extra: str = "") -> str:
    return f"name: {name}\nregions:\n  - name: us-east\n    racks: {racks}\n{extra}"


# ---------------------------------------------------------------- id collisions
@pytest.mark.parametrize("rack", ["leaf-rail0-0", "spine-1", "leaf-x", "spine-0"])
def test_rack_named_like_a_switch_is_refused(rack: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_fleet(spec(f"[{{template: vr-nvl72, names: [{rack}, r02, r03]}}]"))
    assert rack in str(err.value) and "network switches" in str(err.value)


_word = st.from_regex(r"\A[a-z0-9][a-z0-9-]{0,12}\Z", fullmatch=True)
_switchlike = st.one_of(
    st.builds(lambda k, g: f"leaf-rail{k}-{g}", st.integers(0, 4), st.integers(0, 3)),
    st.builds(lambda k: f"spine-{k}", st.integers(0, 9)),
)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(names=st.lists(st.one_of(_word, _switchlike), min_size=1, max_size=6, unique=True),
       auto=st.integers(0, 3))
def test_every_accepted_spec_keeps_every_rack(names: list[str], auto: int) -> None:
    """Over random rack names (many shaped like switch ids): a spec is refused, or every rack
    it names gets its own id and survives into the inventory."""
    quoted = ", ".join(repr(n) for n in names)
    groups = f"[{{template: hgx-h100, names: [{quoted}], nodes_per_rack: 1}}"
    groups += f", {{template: hgx-h100, count: {auto}, nodes_per_rack: 1}}]" if auto else "]"
    try:
        fleet = parse_fleet(spec(groups, extra="network: {spines_per_region: 10}\n"))
    except SpecError as err:
        assert any(n.startswith(("leaf-", "spine-")) for n in names), str(err)
        return
    topo = Topology.build(fleet)
    assert len(topo.index) == len(topo.ids)
    racks = [r.id for r in topo.racks]
    assert len(racks) == len(names) + auto
    assert all(topo.kinds[topo.index[r]] == RACK for r in racks)
    store = Store("sqlite://")
    load_topology(store, topo)
    assert sorted(r.id for r in store.components(kind=RACK)) == sorted(racks)
    assert store.count_components() == len(topo.ids)


# ---------------------------------------------------------------- names
@pytest.mark.parametrize("name", ['"[/]"', '"a\\x07b"', '"us/east"', '"[bold]x"', '""',
                                  "us-east", '"' + "x" * 64 + '"'])
def test_bad_fleet_names_are_refused(name: str) -> None:
    with pytest.raises(SpecError, match=r"name"):
        parse_fleet(spec("[{template: vr-nvl72, count: 1}]", name=name))


def test_good_fleet_names_still_load() -> None:
    for name in ("seed-504", "Lab_2.b", "x"):
        assert parse_fleet(spec("[{template: vr-nvl72, count: 1}]", name=name)).name == name


# ---------------------------------------------------------------- caps
@pytest.mark.parametrize("racks,extra,needle", [
    ("[{template: vr-nvl72, count: 1e23}]", "", "count"),
    (f"[{{template: vr-nvl72, count: {MAX_RACKS_PER_GROUP + 1}}}]", "",
     str(MAX_RACKS_PER_GROUP)),
    ("[{template: vr-nvl72, count: 1}]", "network: {spines_per_region: 100000000}\n", "1024"),
    ("[{template: vr-nvl72, count: 1}]", "network: {racks_per_leaf: 100000000}\n", "1024"),
])
def test_counts_are_capped(racks: str, extra: str, needle: str) -> None:
    t0 = time.perf_counter()
    with pytest.raises(SpecError) as err:
        parse_fleet(spec(racks, extra=extra))
    assert needle in str(err.value)
    assert time.perf_counter() - t0 < 1.0


def test_fleet_beyond_design_target_needs_max_gpus() -> None:
    racks = "[{template: vr-nvl72, count: 1900}]"  # 136,800 GPUs
    with pytest.raises(SpecError) as err:
        parse_fleet(spec(racks))
    msg = str(err.value)
    assert "136800 GPUs" in msg and str(DEFAULT_MAX_GPUS) in msg and "max_gpus: 136800" in msg
    assert parse_fleet(spec(racks, extra="max_gpus: 140000\n")).gpu_count == 136_800


# ---------------------------------------------------------------- strict types
@pytest.mark.parametrize("value", ['"3"', "true", "3.0", "2.5"])
def test_count_must_be_an_integer(value: str) -> None:
    with pytest.raises(SpecError, match=r"count"):
        parse_fleet(spec(f"[{{template: vr-nvl72, count: {value}}}]"))


def test_power_budget_must_be_finite() -> None:
    body = "\n".join(["name: lab", "regions:", "  - name: a", "    power_budget_kw: .inf",
                      "    racks: [{template: vr-nvl72, count: 1}]", ""])
    with pytest.raises(SpecError, match=r"power_budget_kw.*finite"):
        parse_fleet(body)


# ---------------------------------------------------------------- YAML budgets
def test_alias_bomb_is_refused_quickly() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        prev = f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [{', '.join([prev] * 10)}]")
    t0 = time.perf_counter()
    with pytest.raises(SpecError, match=str(MAX_ALIAS_VALUES)):
        parse_fleet("\n".join(lines) + "\nname: lab\n")
    assert time.perf_counter() - t0 < 2.0


def test_small_aliases_still_work() -> None:
    body = ("g: &g {template: vr-nvl72, count: 1}\nname: lab\nregions:\n"
            "  - {name: a, racks: [*g]}\n  - {name: b, racks: [*g]}\n")
    with pytest.raises(SpecError, match=r"\bg\b.*remove this key"):
        parse_fleet(body)  # the alias expands; the unknown top-level key is the only error
    assert load_yaml_data(body, "x")["regions"][1]["racks"][0]["count"] == 1


def test_deep_nesting_is_an_error() -> None:
    for text in ("[" * 5000 + "]" * 5000, "a:\n" + "".join(f"{' ' * i}b:\n" for i in
                                                           range(1, 60)) + " " * 60 + "c: 1\n"):
        with pytest.raises(SpecError, match=r"nested"):
            parse_fleet(text)


@pytest.mark.parametrize("text", ["? [a, b]\n: 1\nname: lab\n", "{a: 1}: 2\n", "1: x\n",
                                  "<<: {name: lab}\n"])
def test_non_text_keys_are_errors(text: str) -> None:
    with pytest.raises(SpecError, match=r"key|merge"):
        parse_fleet(text)


@pytest.mark.parametrize("payload,needle", [
    (b"name: lab\x00\n", "NUL"),
    (b"\x89PNG\r\n\x1a\n\xff\xfe binary", "UTF-8"),
    (b"name: lab\x07\n", "control"),
])
def test_binary_files_are_errors(tmp_path: Path, payload: bytes, needle: str) -> None:
    f = tmp_path / "fleet.yaml"
    f.write_bytes(payload)
    with pytest.raises(SpecError, match=needle):
        load_fleet(str(f))


def test_oversized_file_and_directory_are_errors(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_bytes(b"# pad\n" * (MAX_FILE_BYTES // 6 + 1))
    with pytest.raises(SpecError, match=r"MiB cap"):
        load_fleet(str(big))
    with pytest.raises(SpecError, match=r"is a directory"):
        load_fleet(str(tmp_path))
    assert issubclass(SpecError, InputError)
