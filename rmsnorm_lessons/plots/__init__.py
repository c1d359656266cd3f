"""Every picture of the course (matplotlib; no GPU needed to draw), one module per lesson or two.

Figures are small on purpose: the notebooks ship with their outputs, so each PNG must stay light.
Functions return the matplotlib Figure; in a notebook it is displayed by being the cell's last value
or by ``plt.show()``. What the pictures show (lanes, sectors, banks, the butterfly) is computed in
:mod:`rmsnorm_lessons.access`; this package only draws. Every figure is importable from here
(``rl.plots.access_pattern``); :mod:`.figure` holds what they share.
"""
from .figure import COPY_COLOR, DPI, FIGSIZE, bandwidth_bars
from .lessons_00_03 import (access_pattern, butterfly, gradient_check, roofline, speedup_bars,
                            thread_indices)
from .lessons_04_07 import (bank_conflicts, bf16_error_histogram, partials_reduction,
                            shared_memory_chart,
                            ticket_timeline, v4_staging_banks)
from .lesson09 import bytes_in_flight, memory_levels
from .lesson10 import fixed_cost, floor_and_fixed, speed_of_light, v7_row_layout
from .lesson13 import profile_bars, seed_loop_rows

__all__ = [
    "COPY_COLOR", "DPI", "FIGSIZE", "bandwidth_bars", "access_pattern", "butterfly",
    "thread_indices", "gradient_check", "speedup_bars", "bank_conflicts", "v4_staging_banks",
    "partials_reduction", "ticket_timeline", "bf16_error_histogram", "shared_memory_chart",
    "v7_row_layout", "speed_of_light", "floor_and_fixed", "fixed_cost", "seed_loop_rows",
    "profile_bars", "bytes_in_flight", "roofline", "memory_levels",
]
