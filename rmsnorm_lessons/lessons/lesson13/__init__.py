"""Lesson 13 (finding bugs and bottlenecks): the bugs compute-sanitizer finds (:mod:`.bugs`), what
the seed gets wrong, the kernel exercise (the seed's row loop made uniform, :mod:`.exercise`), the
whole ladder profiled at one shape for one roofline (:func:`ladder_profile`), and the questions
(:mod:`.questions`).
"""
from __future__ import annotations

from .exercise import check_seed_loop, splice, split_shapes  # noqa: F401
from .plots import (  # noqa: F401  (the lesson's pictures)
    ladder_roofline,
    ladder_rows,
    ladder_table,
    profile_bars,
    seed_loop_rows,
)
from .questions import (  # noqa: F401
    blocks_for,
    check_blocks_for_occupancy,
    check_dram_peak,
    check_dram_percent,
    check_occupancy_cap,
    check_wrap_row,
    dram_peak,
)
from .roofline import LADDER_SHAPE, ladder, ladder_profile, roof  # noqa: F401
