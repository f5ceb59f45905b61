"""Which cgroup hierarchy holds a sandbox's memory and pids limits, read from mountinfo.

The machines here mount cgroup v1 controllers beside an empty cgroup2 (a hybrid); most
current distributions mount cgroup2 alone. A cgroup2 mount counts only for the
controllers its ``cgroup.controllers`` offers, so the lines below point at folders made
for the test.
"""

from __future__ import annotations

from pathlib import Path

from deepledger.tools.servers.sandbox_cgroups import Hierarchy, find_hierarchies


def _line(mount_point: Path, fstype: str, options: str) -> str:
    return f"30 25 0:26 / {mount_point} rw,nosuid - {fstype} cgroup {options}"


def _cgroup2(folder: Path, controllers: str) -> Path:
    folder.mkdir()
    (folder / "cgroup.controllers").write_text(controllers + "\n")
    return folder


def test_a_cgroup2_mount_offering_both_controllers_is_used_for_both(tmp_path: Path) -> None:
    unified = _cgroup2(tmp_path / "unified", "cpuset cpu io memory hugetlb pids")
    found = find_hierarchies(_line(unified, "cgroup2", "rw,nsdelegate"))
    assert found == {"memory": Hierarchy(unified, 2), "pids": Hierarchy(unified, 2)}


def test_a_hybrid_host_uses_the_v1_controllers_its_cgroup2_does_not_offer(
    tmp_path: Path,
) -> None:
    unified = _cgroup2(tmp_path / "unified", "hugetlb")
    memory, pids = tmp_path / "memory", tmp_path / "pids"
    mountinfo = "\n".join(
        [
            _line(tmp_path / "cpu", "cgroup", "rw,cpu"),
            _line(memory, "cgroup", "rw,memory"),
            _line(pids, "cgroup", "rw,pids"),
            _line(unified, "cgroup2", "rw"),
        ]
    )
    found = find_hierarchies(mountinfo)
    assert found == {"memory": Hierarchy(memory, 1), "pids": Hierarchy(pids, 1)}
    assert found["memory"].parent == memory / "deepledger-sandboxes"


def test_v2_is_preferred_where_both_offer_a_controller(tmp_path: Path) -> None:
    unified = _cgroup2(tmp_path / "unified", "memory")
    pids = tmp_path / "pids"
    mountinfo = "\n".join(
        [
            _line(tmp_path / "memory", "cgroup", "rw,memory"),
            _line(pids, "cgroup", "rw,pids"),
            _line(unified, "cgroup2", "rw"),
        ]
    )
    assert find_hierarchies(mountinfo) == {
        "memory": Hierarchy(unified, 2),
        "pids": Hierarchy(pids, 1),
    }


def test_no_cgroup_mount_means_no_hierarchy(tmp_path: Path) -> None:
    mountinfo = f"22 1 252:0 / / rw,relatime - ext4 /dev/vda rw\n{_line(tmp_path, 'tmpfs', 'rw')}"
    assert find_hierarchies(mountinfo) == {}
