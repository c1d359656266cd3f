"""Predict, then measure: the learner writes a guess before a timing or profiling result is shown,
and the measurement cell shows the guess beside what it measures. Nothing here grades.

    mine = rl.predict.guess("02.v1_ms", ms=0.8, pct_of_copy=5)      # a cell tagged `prediction`
    ...                                                             # the measurement
    rl.predict.versus(mine, ms=t1.ms, pct_of_copy=t1.pct_of_copy,
                      why="every row's atomics wait on one another in L2")

A field whose value is ``...`` (or None) is not written yet. :func:`guess` keeps each prediction in
the process under its key, so :func:`versus` also takes the key. Where recording is on
(:data:`rmsnorm_lessons.course.record.ENV`) :func:`versus` records one line, exercise
``predict.<key>``, status PREDICTED or NOT PREDICTED, with the prediction error.

In IPython a gap is a display whose data (:data:`GAP_MIME`) keeps the measurement: where a
``%%gpu`` measurement cell cannot run, :func:`.notebook.gpu_cell` shows the output the course's GPU
saved and :func:`replay` sets the learner's own guess beside that saved measurement.
"""
from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass, field

__all__ = ["guess", "versus", "Prediction", "Gap", "NUMERIC", "WORDS", "BOUNDS", "get", "replay",
           "measurement_only", "GAP_MIME"]

KEY = re.compile(r"(\d\d)\.([a-z0-9_]+)")
KEY_RULE = '"NN.name": NN the lesson number (two digits), name of a-z, 0-9 and _ (e.g. "02.v1_ms")'
#: numeric fields, each with how a value reads in a sentence ("{}" is the number)
NUMERIC = {"ms": "{} ms", "us": "{} us", "gbps": "{} GB/s", "pct_of_copy": "{} % of copy",
           "pct_of_ceiling": "{} % of the ceiling", "speedup": "speedup {}x", "ratio": "ratio {}",
           "count": "count {}"}
BOUNDS = ("memory", "latency", "compute", "atomics", "launch")
WORDS = {"bound": "{} bound", "stall": "stall {}"}
FIELDS = (*NUMERIC, *WORDS)
WITHIN = 0.10  # a numeric guess this close (relative to the measurement) reads "within 10 %"
NO_GUESS = "no guess was written: predict first next time (the cell above)"
#: the MIME type of a gap's data in a notebook's output (beside its text/plain)
GAP_MIME = "application/vnd.rmsnorm-lessons.gap+json"

_GUESSES: dict = {}


def _num(value: float) -> str:
    if value >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


def _check_key(key) -> re.Match:
    m = KEY.fullmatch(key) if isinstance(key, str) else None
    if m is None:
        raise ValueError(f"key must be {KEY_RULE}; got {key!r}")
    return m


def _unknown(name: str, what: str) -> ValueError:
    return ValueError(f"{what} {name!r} is not a field; the fields are {', '.join(FIELDS)}")


def _word(name: str, value, who: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{who} {name} must be a word (a string), got {value!r}")
    text = value.strip().lower()
    if name == "bound":
        text = re.sub(r"[\s_-]*bound$", "", text)
        if text not in BOUNDS:
            raise ValueError(f"{who} bound must be one of {', '.join(BOUNDS)}; got {value!r}")
        return text
    return re.sub(r"[\s-]+", "_", text)


def _number(name: str, value, who: str, zero_ok: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{who} {name} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        rule = ">= 0" if zero_ok else "> 0"
        raise ValueError(f"{who} {name} must be finite and {rule}, got {value!r}")
    return value


def _value(name: str, value, who: str, zero_ok: bool = False):
    if name in NUMERIC:
        return _number(name, value, who, zero_ok)
    if name in WORDS:
        return _word(name, value, who)
    raise _unknown(name, who)


def _reads(name: str, value) -> str:
    if name in NUMERIC:
        return NUMERIC[name].format(_num(value))
    return WORDS[name].format(value)


class _Shown:
    """Shown where made (in IPython, with its data for :func:`replay`); IPython's display of the
    same object in that cell adds nothing."""

    _shown_in = None

    def _bundle(self) -> dict | None:
        return None

    def _show(self) -> None:
        bundle = self._bundle()
        if bundle is not None and _shell() is not None:
            from IPython.display import publish_display_data

            publish_display_data({"text/plain": str(self), **bundle})
        else:
            print(str(self))

    def _print(self) -> None:
        self._show()
        self._shown_in = _cell_count()

    def _ipython_display_(self):
        if self._shown_in is None or self._shown_in != _cell_count():
            self._show()


def _shell():
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def _cell_count():
    ip = _shell()
    return None if ip is None else ip.execution_count


@dataclass(eq=False)
class Prediction(_Shown):
    """A learner's guess: ``fields`` maps each field named to its value, None where not written."""

    key: str
    fields: dict

    @property
    def lesson(self) -> str:
        return self.key[:2]

    @property
    def written(self) -> dict:
        return {k: v for k, v in self.fields.items() if v is not None}

    @property
    def pending(self) -> list:
        return [k for k, v in self.fields.items() if v is None]

    def __str__(self) -> str:
        if self.pending:
            return (f"Prediction {self.key} is not written yet: replace each ... "
                    f"({', '.join(self.pending)}) with your guess and run this cell again.")
        said = ", ".join(_reads(k, v) for k, v in self.fields.items())
        return (f"Prediction {self.key}: {said}. The measurement below shows it beside what it "
                f"measures.")

    def _repr_pretty_(self, p, cycle):
        p.text(str(self))


def guess(key: str, **fields) -> Prediction:
    """Write a prediction (in a cell tagged ``prediction``); a value ``...`` is not written yet."""
    _check_key(key)
    if not fields:
        raise ValueError(f"guess({key!r}) needs at least one field: {', '.join(FIELDS)}")
    kept = {}
    for name, value in fields.items():
        if name not in FIELDS:
            raise _unknown(name, "guess field")
        kept[name] = None if value is ... or value is None else _value(name, value, "the guess's")
    mine = Prediction(key, kept)
    _GUESSES[key] = mine
    mine._print()
    return mine


def get(key: str) -> Prediction | None:
    """The prediction last written under ``key`` in this process, or None."""
    _check_key(key)
    return _GUESSES.get(key)


@dataclass(eq=False)
class Gap(_Shown):
    """A prediction beside its measurement. ``rows``: (field, guess or None, measured, gap words).
    ``error``: the largest |guess - measured| / measured over the numeric fields guessed (None
    without a guess)."""

    key: str
    prediction: Prediction | None
    measured: dict
    rows: list = field(default_factory=list)
    error: float | None = None
    summary: str = ""
    why: str = ""

    @property
    def guessed(self) -> bool:
        return any(g is not None for _, g, _, _ in self.rows)

    @property
    def status(self) -> str:
        return "PREDICTED" if self.guessed else "NOT PREDICTED"

    def headline(self) -> str:
        if not self.guessed:
            return f"{self.key}: measured; {NO_GUESS}"
        error = "n/a" if self.error is None else _pct(self.error)
        return f"{self.key}: your guess beside the measurement (prediction error {error})"

    def __str__(self) -> str:
        table = [("field", "your guess", "measured", "gap")]
        for name, g, m, words in self.rows:
            table.append((name, "-" if g is None else _cell(name, g), _cell(name, m), words))
        widths = [max(len(r[i]) for r in table) for i in range(3)]
        lines = [self.headline()]
        lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3]
                  for r in table]
        closing = " ".join(s for s in (self.summary, _sentence(self.why)) if s)
        return "\n".join(lines + ([closing] if closing else []))

    def _repr_pretty_(self, p, cycle):
        p.text(str(self))

    def data(self) -> dict:
        """What the notebook output keeps beside the text (:data:`GAP_MIME`): enough to show
        another learner's guess beside this measurement (:func:`replay`) and for ``progress``."""
        return {"key": self.key, "status": self.status, "error": self.error, "why": self.why,
                "measured": dict(self.measured), "rows": [
                    [n, None if g is None else _cell(n, g), _cell(n, m), w]
                    for n, g, m, w in self.rows]}

    def _bundle(self) -> dict:
        return {GAP_MIME: self.data()}


def _pct(error: float) -> str:
    return f"{100 * error:.0f} %" if error >= 0.1 else f"{100 * error:.1f} %"


def _cell(name: str, value) -> str:
    return _num(value) if name in NUMERIC else str(value)


def _sentence(text: str) -> str:
    text = (text or "").strip()
    if not text:
        return ""
    text = text[0].upper() + text[1:]
    return text if text[-1] in ".!?" else text + "."


def _gap_words(name: str, g, m) -> tuple[str, float | None]:
    """The gap column's words, and the relative error (numeric fields with m > 0)."""
    if g is None:
        return "not guessed", None
    if name in WORDS:
        return ("right", None) if g == m else (f"you said {g}; it is {m}", None)
    if m == 0:
        return "measured 0", None
    error = abs(g - m) / m
    if error <= WITHIN:
        return f"within {100 * WITHIN:.0f} %", error
    ratio, side = (g / m, "higher") if g > m else (m / g, "lower")
    if ratio < 1.5:  # a percentage of the measurement, as the error is
        return f"{100 * error:.0f} % {side}", error
    return f"{ratio:.1f}x {side}", error


def _summary(rows, errors: dict) -> str:
    if not any(g is not None for _, g, _, _ in rows):
        return ""  # the headline says so
    wrong_words = [(n, g, m) for n, g, m, _ in rows if n in WORDS and g is not None and g != m]
    if errors:
        name = max(errors, key=errors.get)
        if errors[name] > WITHIN:
            g, m = next((g, m) for n, g, m, _ in rows if n == name)
            words = _gap_words(name, g, m)[0]
            return (f"Your largest miss is {name}: you guessed {_num(g)}, it measured {_num(m)} "
                    f"({words}).")
    if wrong_words:
        n, g, m = wrong_words[0]
        return f"The numbers are close, but you said {g} for {n}; it is {m}."
    return "Every guess is within 10 % of the measurement."


def versus(mine, why: str = "", **measured) -> Gap:
    """Show a prediction (a :class:`Prediction` or its key) beside the measurement; print the table
    and one sentence on the largest gap, then ``why``. Never grades; never raises for a missing
    guess. Records one line where recording is on."""
    if isinstance(mine, Prediction):
        key, prediction = mine.key, mine
    elif isinstance(mine, str):
        _check_key(mine)
        key, prediction = mine, _GUESSES.get(mine)
    else:
        raise TypeError(f"mine must be a Prediction (what guess() returned) or its key "
                        f"({KEY_RULE}), got {type(mine).__name__}")
    if not isinstance(why, str):
        raise TypeError(f"why must be a string (one sentence), got {type(why).__name__}")
    if not measured:
        raise ValueError(f"versus({key!r}) needs at least one measured field: {', '.join(FIELDS)}")
    values = {}
    for name, value in measured.items():
        if name not in FIELDS:
            raise _unknown(name, "measured field")
        if prediction is not None and name not in prediction.fields:
            raise ValueError(f"measured field {name!r} was not guessed in {key}; its guess has "
                             f"{', '.join(prediction.fields)}")
        if value is ... or value is None:
            raise ValueError(f"measured field {name!r} has no value: pass the measurement")
        values[name] = _value(name, value, "the measured", zero_ok=True)
    return _shown(_compare(key, prediction, why, values))


def _saved(data) -> tuple | None:
    """(key, why, measured values) of a gap's saved data; None for data that is not a gap's."""
    try:
        key, why = data["key"], str(data.get("why") or "")
        _check_key(key)
        values = {n: _value(n, v, "the measured", zero_ok=True)
                  for n, v in dict(data["measured"]).items()}
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return (key, why, values) if values else None


def replay(data) -> Gap | None:
    """The learner's guess beside a measurement another run saved (``data``: a gap's
    :meth:`Gap.data`), where the measurement cell cannot run here (:func:`.notebook.gpu_cell`
    shows the saved output instead). None for data that is not a gap's."""
    if _saved(data) is None:
        return None
    key, why, values = _saved(data)
    mine = _GUESSES.get(key)
    if mine is not None and not set(values) <= set(mine.fields):
        kept = {n: v for n, v in values.items() if n in mine.fields}
        mine, values = (mine, kept) if kept else (None, values)
    return _shown(_compare(key, mine, why, values))


def measurement_only(data) -> dict | None:
    """A saved gap's output without the guess of the run that saved it (the student edition keeps
    the measurement, for :func:`replay`, and hides the author's guess); None for data that is not a
    gap's."""
    if _saved(data) is None:
        return None
    key, why, values = _saved(data)
    gap = _compare(key, None, why, values)
    text = str(gap).split("\n", 1)
    text[0] = (f"{key}: what the course's GPU measured (run this cell after your prediction to "
               f"see your guess beside it)")
    return {"text/plain": "\n".join(text), GAP_MIME: gap.data()}


def _compare(key: str, prediction: Prediction | None, why: str, values: dict) -> Gap:
    rows, errors = [], {}
    for name, m in values.items():
        g = prediction.fields.get(name) if prediction is not None else None
        words, error = _gap_words(name, g, m)
        rows.append((name, g, m, words))
        if error is not None:
            errors[name] = error
    gap = Gap(key, prediction, values, rows, max(errors.values()) if errors else None,
              _summary(rows, errors), why.strip())
    return gap


def _shown(gap: Gap) -> Gap:
    gap._print()
    _record(gap)
    return gap


def _record(gap: Gap) -> None:
    try:
        from . import record

        record.record_prediction(gap.key, gap.status, gap.headline(), gap.error)
    except Exception:  # recording is a convenience; never turn a measurement cell into an error
        pass

