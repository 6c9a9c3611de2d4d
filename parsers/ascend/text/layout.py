"""Which files of an output folder the text reader reads: torch_npu's names first, else the msprof export's."""

from __future__ import annotations

from pathlib import Path

TRACE_NAMES = ("trace_view.json",)
TRACE_GLOB = "msprof_*.json"
KERNEL_NAMES = ("kernel_details.csv",)
KERNEL_GLOB = "op_summary_*.csv"
MEMORY_NAMES = ("memory_record.csv",)
MEMORY_GLOB = "memory_record_*.csv"
BLOCK_NAMES = ("operator_memory.csv",)
BLOCK_GLOB = "operator_memory_*.csv"
MODULE_NAMES = ("npu_module_mem.csv",)
MODULE_GLOB = "npu_module_mem_*.csv"
TORCH_NPU_NAMES = TRACE_NAMES + KERNEL_NAMES
"""A run whose trace or kernel table has one of these names is torch_npu's text output; else an msprof export."""
OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"


def first(folder: Path, names: tuple[str, ...], pattern: str) -> Path | None:
    """The file of ``folder`` with the first of ``names``, else the first matching ``pattern``; None if neither."""
    for name in names:
        if (folder / name).is_file():
            return folder / name
    found = sorted(folder.glob(pattern))
    return found[0] if found else None


def run_dir(folder: Path) -> Path | None:
    """The ``*_ascend_pt`` folder above an output folder (where profiler_info lives)."""
    return folder.parent if folder.name == OUTPUT_DIR else None
