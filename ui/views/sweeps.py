"""Page 1: every sweep with its status, its runs counted by status, and when it ran."""

from __future__ import annotations

import streamlit as st

from gapwatch.ui import data, nav, source


def body() -> None:
    url = source.db_url()
    source.store()  # fails with one line if the database vanished
    sweep_rows = source.sweeps(url)
    st.title("Sweeps")
    if not sweep_rows:
        st.info(
            "The store holds no sweep yet. Start one with "
            "`gapwatch sweep examples/quickstart.yaml`; it shows up here while it runs."
        )
        return
    table = data.sweeps_table(sweep_rows)
    times = data.sweep_times(source.runs(url, None))
    table["last run ended"] = [times.get(int(i), (None, None))[1] for i in table["id"]]
    table["open"] = [f"sweep?sweep={i}" for i in table["id"]]
    picked = st.dataframe(
        table,
        hide_index=True,
        on_select="rerun",
        selection_mode="single-row",
        key="sweeps_table",
        column_config={
            "open": st.column_config.LinkColumn("open", display_text="open"),
            "created": st.column_config.DatetimeColumn("created", format="YYYY-MM-DD HH:mm"),
            "last run ended": st.column_config.DatetimeColumn(
                "last run ended", format="YYYY-MM-DD HH:mm"
            ),
        },
    )
    rows = picked.selection.rows if picked is not None else []
    if rows:
        st.switch_page(nav.SWEEP, query_params={"sweep": str(table.iloc[rows[0]]["id"])})
    st.caption("Pick a row (or a link below) to open the sweep.")
    for _, s in table.head(50).iterrows():
        st.page_link(
            nav.SWEEP,
            label=nav.plain(f"{s['name']} ({s['status']}, {s['runs']} runs)"),
            query_params={"sweep": str(s["id"])},
        )


def live() -> bool:
    try:
        return any(s.get("status") == "running" for s in source.sweeps(source.db_url()))
    except Exception:  # noqa: BLE001 - the body reports the error itself
        return False


nav.page_body(body, live=live())
