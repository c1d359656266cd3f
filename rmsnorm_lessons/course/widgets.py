"""Interactive controls for the lessons (ipywidgets).

Each control is an object that displays itself (make it a cell's last value, or ``display(...)``
it). Controls that need no GPU draw a first picture when displayed, so a saved notebook shows it
even where widgets do not render (the picture is an ordinary output that the controls update in
place). Nothing here launches a kernel until a button is pressed.
"""
from __future__ import annotations

import html

import matplotlib.pyplot as plt
import numpy as np

from ..core import compare, gpu, ladder, validate
from ..inspection import access, occupancy
from ..speed import bench
from . import plots


def _ipywidgets():
    try:
        import ipywidgets  # lazy: ipywidgets is optional (the test and lab extras)
    except ImportError as exc:  # pragma: no cover - ipywidgets is in the test and lab extras
        raise ImportError("the interactive controls need ipywidgets: "
                          "pip install ipywidgets") from exc
    return ipywidgets


# --- lessons 00-03
# ----------------------------------------------------------------------------------


class AccessExplorer:
    """Which elements of ``inp`` the threads load at one loop step, for v1 (thread per row) or v2
    (warp per row): pick the layout, the block size, C, N (rows drawn) and the step; the picture
    redraws.

    Needs no GPU: it draws :func:`rmsnorm_lessons.course.plots.access_pattern`.
    """

    def __init__(self, layout: str = "thread_per_row", N: int = 32, C: int = 64,
                 block_size: int = 64,
                 step: int = 0):
        w = _ipywidgets()
        layout = access.layout_name(layout)
        style = {"description_width": "initial"}
        self.layout = w.ToggleButtons(options=[(text, key) for key, text in access.LAYOUTS.items()],
                                      value=layout, description="layout",
                                      style={**style, "button_width": "250px"})
        self.block_size = w.IntSlider(value=block_size, min=32, max=1024, step=32,
                                      description="block size",
                                      style=style, continuous_update=False)
        self.C = w.IntSlider(value=C, min=1, max=512, description="C", style=style,
                             continuous_update=False)
        self.N = w.IntSlider(value=N, min=1, max=64, description="N (rows drawn)", style=style,
                             continuous_update=False)
        self.step = w.IntSlider(value=0, min=0, max=self._steps() - 1, description="loop step",
                                style=style,
                                continuous_update=False)
        self.step.value = min(max(int(step), 0), self.step.max)
        self.note = w.HTML()
        self.controls = w.VBox([self.layout, w.HBox([self.N, self.C]), w.HBox([self.block_size,
                self.step]),
                                self.note])
        self._handle = None
        for control in (self.layout, self.block_size, self.C, self.N, self.step):
            control.observe(self._changed, names="value")
        self._update_note()

    def _steps(self) -> int:
        return access.loop_steps(self.layout.value, int(self.C.value))

    def _update_note(self):
        C = int(self.C.value)
        sectors = access.warp_sectors(self.layout.value, C, int(self.step.value))
        self.note.value = (f"<small>{self._steps()} loop steps cover a row; at this step warp 0's "
                           "load of "
                           f"<code>inp</code> touches <b>{sectors}</b> sector(s) of 32 "
                           "bytes.</small>")

    def figure(self):
        """The picture for the current settings (a matplotlib Figure)."""
        return plots.access_pattern(self.layout.value, rows=int(self.N.value), C=int(self.C.value),
                                    step=int(self.step.value),
                                    block_size=int(self.block_size.value))

    def _changed(self, change=None):
        self.step.max = max(0, self._steps() - 1)  # clamps the step's value when the range shrinks
        self._update_note()
        if self._handle is not None:
            self._handle.update(self.figure())

    def _ipython_display_(self):
        from IPython.display import (
            display,  # lazy: IPython is there only where the widget is shown
        )

        display(self.controls)
        self._handle = display(self.figure(), display_id=True)


def access_explorer(layout: str = "thread_per_row", N: int = 32, C: int = 64, block_size: int = 64,
                    step: int = 0) -> AccessExplorer:
    """An :class:`AccessExplorer`; make it a cell's last value to show it."""
    return AccessExplorer(layout, N, C, block_size, step)


class CheckAndTime:
    """Pick a version and a shape, press the button: the version is checked against the float64
    reference (:func:`rmsnorm_lessons.core.compare.check_version`) and, if right, timed
    (:func:`rmsnorm_lessons.speed.bench.bench_version`) against the copy bandwidth, measured once.

    Without a GPU the button prints one sentence saying so. Every timing is kept in ``results``.
    """

    def __init__(self, versions=None, N: int = 8192, C: int = 1024, repeats: int = 20,
                 version: str | None = None):
        w = _ipywidgets()
        versions = list(versions or ladder.VERSIONS)
        for v in versions:
            ladder.get(v)  # a clear error for a misspelt version
        style = {"description_width": "initial"}
        if version is not None and version not in versions:
            raise ValueError(f"version {version!r} is not among the versions offered: "
                             f"{', '.join(versions)}")
        self.version = w.Dropdown(options=versions, value=version or versions[0],
                                  description="version",
                                  style=style)
        self.N = w.BoundedIntText(value=N, min=1, max=1 << 20, description="N", style=style,
                                  layout=w.Layout(width="160px"))
        self.C = w.BoundedIntText(value=C, min=1, max=1 << 16, description="C", style=style,
                                  layout=w.Layout(width="160px"))
        self.button = w.Button(description="check and time", button_style="primary", icon="play")
        self.output = w.Output()
        self.repeats = int(repeats)
        self.results = []
        self.copy_gbps = None
        self.controls = w.VBox([w.HBox([self.version, self.N, self.C, self.button]), self.output])
        self.button.on_click(self._clicked)

    def run(self) -> str:
        """Check and time the current choice; return the report as text (the button prints it)."""
        reason = gpu.why_unavailable()
        if reason is not None:
            return f"Nothing was launched: {reason}"
        version, N, C = self.version.value, int(self.N.value), int(self.C.value)
        spec = ladder.get(version)
        try:  # the shape rules first (C a multiple of 8 for bf16, ...), on empty host arrays
            validate.inputs(spec, *(np.empty((N, C), spec.dtype),) * 2, np.empty((C,),
                    spec.dtype),
                                  np.empty((N,), np.float32))
            report = compare.check_version(version, N, C)
        except ValueError as exc:
            return f"{version} cannot run N={N} C={C}: {exc}"
        lines = [str(report)]
        if not report.ok:
            lines.append("Wrong results are not timed.")
            return "\n".join(lines)
        if self.copy_gbps is None:
            self.copy_gbps = gpu.copy_bandwidth()
        t = bench.bench_version(version, N, C, self.copy_gbps, repeats=self.repeats)
        self.results.append(t)
        lines.append(f"{version} N={N} C={C}: {t.ms:.4f} ms, {t.gbps:.0f} GB/s = "
                     f"{100 * t.fraction_of_copy:.1f} % of the copy bandwidth "
                     f"({self.copy_gbps:.0f} GB/s)")
        return "\n".join(lines)

    def _clicked(self, _button=None):
        from IPython.display import (
            display,  # lazy: IPython is there only where the widget is shown
        )

        self.button.disabled = True
        try:
            with self.output:
                self.output.clear_output()
                print(f"running {self.version.value} at N={self.N.value} C={self.C.value} ...")
                text = self.run()
                self.output.clear_output()
                print(text)
                if self.results:
                    fig = plots.bandwidth_bars(self.results, self.copy_gbps, title="every run of "
                                                                                   "this control")
                    display(fig)
                    plt.close(fig)
        finally:
            self.button.disabled = False

    def _ipython_display_(self):
        from IPython.display import (
            display,  # lazy: IPython is there only where the widget is shown
        )

        display(self.controls)
        reason = gpu.why_unavailable()
        if reason is None:
            print("Pick a version and a shape and press the button: it checks the version against "
                  "the float64 "
                  "reference, then times it against the copy bandwidth.")
        else:
            print("No GPU here, so the button will only say so; on a GPU it checks and times the "
                  "version.")


def check_and_time(versions=None, N: int = 8192, C: int = 1024, repeats: int = 20,
                   version: str | None = None) -> CheckAndTime:
    """A :class:`CheckAndTime` control (``version``: the one selected first); make it a cell's last
    value."""
    return CheckAndTime(versions, N, C, repeats, version)


# --- lessons 04-08
# ----------------------------------------------------------------------------------


def shared_memory_summary(version: str = "v3_smem", C: int = 4096, block_size: int | None = None,
                          arch: str = "sm_90") -> str:
    """One paragraph: a version's dynamic shared memory at C, whether the launch must opt in, how
    many blocks fit on one SM and whether the plan's grid (for N large enough to fill it) runs in
    one wave. No GPU needed."""
    spec = ladder.get(version)
    _, block, need = occupancy.launch_shape(spec, int(C), block_size)
    lim = occupancy.limits(arch)
    if need <= lim.shared_per_block:
        where = f"within the {lim.shared_per_block // 1024} KiB every block may use"
    elif need <= lim.shared_per_block_optin:
        where = (f"above {lim.shared_per_block // 1024} KiB, so the launcher opts in "
                 f"(MAX_DYNAMIC_SHARED_SIZE_BYTES, up to {lim.shared_per_block_optin // 1024} KiB)")
    else:
        where = (f"more than the {lim.shared_per_block_optin // 1024} KiB a block may have: "
                 "it cannot launch")
    occ = occupancy.occupancy(spec, int(C), arch, block_size)
    text = (f"{spec.name} at C={C} with {block} threads a block: {need} B of dynamic shared memory "
            "per block, "
            f"{where}. {occ.blocks_per_sm} block(s) fit on one SM (limited by {occ.limiter}).")
    plan = occupancy.plan_blocks_per_sm(spec, int(C), block_size)
    if plan and occ.blocks_per_sm:
        if occ.blocks_per_sm >= plan:
            text += f" The plan launches {plan} per SM: all of them run at once."
        else:
            text += (f" The plan launches {plan} per SM, so {plan - occ.blocks_per_sm} block(s) "
                     "per SM wait "
                     f"until others finish (a second wave).")
    return text


class SharedMemoryExplorer:
    """Pick a version (v3..v6), C and the block size: the text says how much shared memory a block
    needs and how many blocks fit on an SM; the picture shows both against C. Needs no GPU (nvcc
    only, for the registers of each kernel)."""

    def __init__(self, version: str = "v3_smem", C: int = 4096, block_size: int | None = None,
                 arch: str = "sm_90"):
        w = _ipywidgets()
        spec = ladder.get(version)
        self.arch = arch
        style = {"description_width": "initial"}
        self.version = w.Dropdown(options=list(ladder.with_shared_dweight()), value=spec.name,
                                  description="version",
                                  style=style)
        self.C = w.IntSlider(value=int(C), min=256, max=32768, step=256, description="C",
                             style=style,
                             continuous_update=False)
        self.block_size = w.Dropdown(options=[128, 256, 512, 1024],
                                     value=int(block_size or spec.block_size),
                                     description="threads a block", style=style)
        self.controls = w.VBox([w.HBox([self.version, self.block_size]), self.C])
        self._handle = None
        self._text = None
        self.version.observe(self._version_changed, names="value")
        for control in (self.C, self.block_size):
            control.observe(self._changed, names="value")

    def summary(self) -> str:
        return shared_memory_summary(self.version.value, int(self.C.value),
                                     int(self.block_size.value), self.arch)

    def figure(self):
        return plots.shared_memory_chart(self.version.value, int(self.block_size.value),
                                         int(self.C.value),
                                         self.arch)

    def _version_changed(self, change=None):
        # fires _changed if it moves
        self.block_size.value = ladder.get(self.version.value).block_size
        self._changed()

    def _changed(self, change=None):
        if self._text is not None:
            self._text.update(_Text(self.summary()))
        if self._handle is not None:
            self._handle.update(self.figure())

    def _ipython_display_(self):
        from IPython.display import (
            display,  # lazy: IPython is there only where the widget is shown
        )

        display(self.controls)
        # the text and the picture are ordinary outputs, so a saved notebook shows them without
        # widgets
        self._text = display(_Text(self.summary()), display_id=True)
        self._handle = display(self.figure(), display_id=True)


class _Text:
    """A paragraph that displays as itself (no quotes in plain text, small print in HTML)."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:
        return f"<p><small>{html.escape(self.text)}</small></p>"


def shared_memory_explorer(version: str = "v3_smem", C: int = 4096, block_size: int | None = None,
                           arch: str = "sm_90") -> SharedMemoryExplorer:
    """A :class:`SharedMemoryExplorer`; make it a cell's last value to show it."""
    return SharedMemoryExplorer(version, C, block_size, arch)
