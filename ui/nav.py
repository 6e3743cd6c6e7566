"""Page paths, URL state and the error guard every page body runs inside.

Every choice a page offers is read from and written back to ``st.query_params``, so the
address bar always holds a link that reproduces the view. Pages are files under
``ui/views/`` registered with ``st.navigation`` in ``ui/app.py``; their URL paths are
``/`` (sweeps), ``/sweep``, ``/compare`` and ``/run``.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Callable, Iterable
from datetime import timedelta

import streamlit as st
from sqlalchemy.exc import SQLAlchemyError

from gapwatch.ui.locate import REFRESH_S, UIError, db_url, unreachable_line

SWEEPS = "views/sweeps.py"
SWEEP = "views/sweep.py"
COMPARE = "views/compare.py"
RUN = "views/run.py"


_MARKDOWN = re.compile(r"""([\\`*_{}\[\]()<>#+\-.!|~:$&=^"'@%])""")
"""Every ASCII character that Streamlit's markdown (CommonMark, GFM autolinks, HTML, LaTeX
between ``$``, ``:emoji:`` and ``:color[...]`` directives) may read as syntax."""


_AUTOLINK = re.compile(r"(?i)(?<=:)(?=//)|(?<=www)(?=\.)|(?=@)")
"""Where GFM would start an auto-link in text (``http://``, ``www.``, ``a@b.c``): escaping
does not stop it, since it matches the text after escapes are read."""
_BREAK = "\u2060"  # WORD JOINER: invisible, not a space, breaks the auto-link match


def plain(value: object) -> str:
    """``value`` as literal text inside Streamlit markdown (titles, captions, warnings,
    errors, link and expander labels): each syntax character is backslash-escaped and an
    invisible word joiner is put inside ``://``, ``www.`` and before ``@``, so a stored or
    URL-supplied string shows as typed and never becomes a link (explicit or auto-linked),
    an image or formatting. Not for code spans (backslashes show there)."""
    return _MARKDOWN.sub(r"\\\1", _AUTOLINK.sub(_BREAK, str(value)))


def qp_str(key: str, default: str = "") -> str:
    """The URL parameter ``key`` (the last one if repeated), or ``default``."""
    value = st.query_params.get(key)
    return default if value is None else str(value)


_INT = re.compile(r"-?[0-9]{1,18}")


def qp_int(key: str, lo: int | None = None, hi: int | None = None) -> int | None:
    """The URL parameter ``key`` as an int within [``lo``, ``hi``]: anything but plain
    ASCII digits (at most 18) is reported and ignored, a value out of range is clamped;
    each with one warning."""
    raw = st.query_params.get(key)
    if raw is None or raw == "":
        return None
    if not _INT.fullmatch(str(raw)):
        st.warning(f"ignoring URL parameter {plain(key)}={plain(repr(raw))}: not an integer")
        return None
    value = int(raw)
    clamped = min(max(value, lo if lo is not None else value), hi if hi is not None else value)
    if clamped != value:
        st.warning(
            f"URL parameter {plain(key)}={value} is out of range "
            f"({lo if lo is not None else ''}..{hi if hi is not None else ''}); using {clamped}"
        )
    return clamped


def qp_list(key: str) -> list[str]:
    """A comma-separated URL parameter as a list (empty items dropped)."""
    return [x for x in qp_str(key).split(",") if x]


def qp_bool(key: str, default: bool = False) -> bool:
    raw = st.query_params.get(key)
    if raw is None:
        return default
    return str(raw).lower() in ("1", "true", "yes", "on")


def qp_set(key: str, value: str | int | bool | Iterable[str | int] | None) -> None:
    """Write ``value`` to the URL (None/empty removes the parameter)."""
    if isinstance(value, bool):
        text: str | None = "1" if value else "0"
    elif isinstance(value, int | str):
        text = str(value)
    elif value is None:
        text = None
    else:
        text = ",".join(str(v) for v in value)
    if not text:
        if key in st.query_params:
            del st.query_params[key]
    elif st.query_params.get(key) != text:
        st.query_params[key] = text


def show_error(exc: BaseException) -> None:
    """One clear line for a problem the user can fix; details folded away for a bug."""
    if isinstance(exc, UIError | ValueError):
        st.error(plain(exc))
        return
    down = unreachable_line(db_url(), exc)
    if down is not None:
        st.error(plain(down))
        return
    if isinstance(exc, SQLAlchemyError):
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        st.error(f"the store could not be read ({plain(first)}); check the database and reload")
        return
    if type(exc).__name__ == "StoreError":
        st.error(plain(exc))
        return
    st.error(f"this page failed: {type(exc).__name__}: {plain(exc)}")
    with st.expander("details"):
        st.code("".join(traceback.format_exception(exc)))


def guarded(body: Callable[[], None]) -> None:
    """Run a page body; any error becomes a message in the page, never a traceback."""
    try:
        body()
    except Exception as exc:  # noqa: BLE001 - the page's one place to catch everything
        show_error(exc)


def page_body(body: Callable[[], None], *, live: bool) -> None:
    """Run ``body`` guarded; while ``live`` (a sweep runs) it reruns every REFRESH_S.

    Only the fragment reruns, and the queries under it are cached for a few seconds, so
    a live page refreshes without reloading the whole app or hammering the database.
    """
    refresh = False
    if live:
        refresh = st.toggle(
            f"auto-refresh every {REFRESH_S:g} s (the sweep is running)",
            value=qp_bool("refresh", True),
            key="auto_refresh",
        )
        qp_set("refresh", None if refresh else "0")
    run_every = timedelta(seconds=REFRESH_S) if refresh else None

    @st.fragment(run_every=run_every)
    def _fragment() -> None:
        guarded(body)

    _fragment()
