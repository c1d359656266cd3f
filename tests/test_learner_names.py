"""A check's "replace the ..." names the variable the learner's cell gave it (sectors_v1, not the
check's own v1), read from the cell's text as IPython keeps it in linecache; where that text is
not there, or the argument is an expression, the check's own words stay (CPU)."""
from __future__ import annotations

import linecache

from rmsnorm_lessons.lessons import lesson02


def _cell(text: str, name: str = "<ipython-input-1>") -> dict:
    ns = {"lesson02": lesson02}
    linecache.cache[name] = (len(text), None, text.splitlines(keepends=True), name)
    exec(compile(text, name, "exec"), ns)
    return ns


def test_the_message_names_the_cells_variable():
    ns = _cell("sectors_v1 = ...\nsectors_v2 = 4\n"
               "verdict = lesson02.check_sectors(sectors_v1, sectors_v2, C=1024)\n")
    assert ns["verdict"].message == ("replace the ... of sectors_v1 with your answer (a number "
                                     "or an expression)")
    ns = _cell("idle_sms = ...\nverdict = lesson02.check_idle_sms(\n    4096, 256, 132,\n"
               "    idle=idle_sms)\n", "<ipython-input-2>")
    assert ns["verdict"].message.startswith("replace the ... of idle_sms with your answer")
    ns = _cell("coalescing_change = ...\nverdict = lesson02.check_coalesce_v1(coalescing_change)\n",
               "<ipython-input-3>")
    assert ns["verdict"].message.startswith('replace the ... of coalescing_change with one of "a"')


def test_without_the_cells_text_or_a_name_the_checks_words_stay():
    ns = {"lesson02": lesson02}
    exec(compile("v = lesson02.check_sectors(..., 4, C=1024)\n", "<no text>", "exec"), ns)
    assert ns["v"].message.startswith("replace the ... of v1 with your answer")
    ns = _cell("verdict = lesson02.check_sectors(..., 4, C=1024)\n", "<ipython-input-4>")
    assert ns["verdict"].message.startswith("replace the ... of v1 with your answer")
