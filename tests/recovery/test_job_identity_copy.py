"""A job directory copied with `cp -a` is another job (its own id, its own checkpoints); one
renamed, or moved across file systems (the original gone), is the same job."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from rackscale import owned
from rackscale.recovery.state import JobState
from rackscale.recovery.supervisor import state_origin


def _job(d: Path) -> JobState:
    d.mkdir()
    st = JobState(job="train", job_id="train-1234abcd", command=["true"], gpus=1,
                  assignment=["a"], spares=[], home=owned.dir_identity(d),
                  home_path=str(d.resolve()))
    st.save(d)
    return st


def _origin(d: Path) -> str:
    st = JobState.load(d)
    assert st is not None
    return state_origin(st, owned.dir_identity(d))


def test_the_directory_it_was_written_in(tmp_path: Path) -> None:
    _job(tmp_path / "job")
    assert _origin(tmp_path / "job") == "here"


def test_a_renamed_directory_is_the_same_job(tmp_path: Path) -> None:
    _job(tmp_path / "job")
    os.rename(tmp_path / "job", tmp_path / "renamed")
    assert _origin(tmp_path / "renamed") == "here"


def test_a_copy_whose_original_is_there_is_another_job(tmp_path: Path) -> None:
    _job(tmp_path / "job")
    shutil.copytree(tmp_path / "job", tmp_path / "copy", copy_function=shutil.copy2)
    assert _origin(tmp_path / "copy") == "copy"
    assert _origin(tmp_path / "job") == "here"


def test_a_copy_whose_original_is_gone_was_a_move(tmp_path: Path) -> None:
    _job(tmp_path / "job")
    shutil.copytree(tmp_path / "job", tmp_path / "moved")
    shutil.rmtree(tmp_path / "job")
    assert _origin(tmp_path / "moved") == "moved"


def test_an_original_replaced_by_another_directory_is_not_a_live_original(
        tmp_path: Path) -> None:
    _job(tmp_path / "job")
    shutil.copytree(tmp_path / "job", tmp_path / "moved")
    shutil.rmtree(tmp_path / "job")
    (tmp_path / "job").mkdir()  # a new directory at the old path: another inode
    assert _origin(tmp_path / "moved") == "moved"


def test_a_state_written_before_the_path_was_kept_is_never_taken_for_a_copy(
        tmp_path: Path) -> None:
    st = _job(tmp_path / "job")
    st.home_path = None
    st.save(tmp_path / "job")
    shutil.copytree(tmp_path / "job", tmp_path / "copy")
    assert _origin(tmp_path / "copy") == "moved"
