"""The console's pages as HTML: server-rendered, every value escaped, no inline script or style.

One layout (``page``) with a menu; four bodies: the jobs, one job, the parties, the server. A
page that should follow the job says so in ``data-live`` on ``<main>``, and ``console.js`` (the
one script, served from ``/console.js``) refreshes ``<main>`` when the job's event stream says
something happened, or every ``REFRESH_S`` seconds on the overview pages: never faster than 1 s.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from html import escape
from typing import Any
from urllib.parse import quote

from vflserver.console.charts import line_chart
from vflserver.console.facts import JobFacts, PartyFacts, Phase, ServerFacts
from vflserver.jobs.store import JobRecord

#: Seconds between refreshes of the overview pages (the jobs, the parties, the server).
REFRESH_S = 2


def page(title: str, body: str, *, live: str = "") -> str:
    """The whole document: ``live`` is ``job:<id>`` (follow its events) or ``poll`` (refresh every REFRESH_S)."""
    menu = " ".join(
        f'<a href="{href}">{name}</a>' for href, name in (("/", "Jobs"), ("/parties", "Parties"), ("/server", "Server"))
    )
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{escape(title)} · VFL console</title>"
        '<link rel=stylesheet href="/console.css"><script src="/console.js" defer></script></head>'
        f"<body><header><strong>VFL console</strong> <nav>{menu}</nav></header>"
        f'<main data-live="{escape(live)}" data-refresh="{REFRESH_S}"><h1>{escape(title)}</h1>{body}</main>'
        "</body></html>"
    )


def _table(head: Iterable[str], rows: Iterable[Iterable[str]], cls: str = "") -> str:
    """A table of already-escaped cells."""
    th = "".join(f"<th>{h}</th>" for h in head)
    tr = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{tr}</tbody></table>'


def _when(at: float | None) -> str:
    return "–" if at is None else escape(time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at)))


def _seconds(value: float) -> str:
    if value < 120:
        return f"{value:.0f} s"
    if value < 7200:
        return f"{value / 60:.0f} min"
    return f"{value / 3600:.1f} h"


def _state(state: str) -> str:
    return f'<span class="state {escape(state)}">{escape(state)}</span>'


def _phases(phases: list[Phase]) -> str:
    return ", ".join(f"{escape(p.state)} {_seconds(p.seconds)}" for p in phases) or "–"


def jobs_page(rows: list[tuple[JobRecord, list[Phase]]]) -> str:
    body = _table(
        ("job", "algorithm", "state", "submitter", "submitted", "epochs", "time in each phase"),
        (
            (
                f'<a href="/jobs/{quote(r.job_id, safe="")}">{escape(r.job_id)}</a>',
                escape(r.algorithm),
                _state(r.state),
                escape(r.submitter),
                _when(r.submitted_at),
                f"{r.epochs_done} of {r.epochs}",
                _phases(p),
            )
            for r, p in rows
        ),
        "jobs",
    )
    return page(
        "Jobs", body if rows else '<p class="muted">No job yet: submit one with vfl-jobs submit.</p>', live="poll"
    )


def job_page(facts: JobFacts) -> str:
    r = facts.record
    parts = [
        '<dl class="facts">',
        f"<dt>state</dt><dd>{_state(r.state)}</dd>",
        f'<dt>message</dt><dd id="status">{escape(facts.status)}</dd>' if facts.status else "",
        f"<dt>algorithm</dt><dd>{escape(r.algorithm)}</dd>",
        f"<dt>submitter</dt><dd>{escape(r.submitter)}</dd>",
        f"<dt>submitted</dt><dd>{_when(r.submitted_at)}</dd>",
        f"<dt>started</dt><dd>{_when(r.started_at)}</dd>",
        f"<dt>ended</dt><dd>{_when(r.ended_at)}</dd>",
        f"<dt>epochs</dt><dd>{r.epochs_done} of {r.epochs}</dd>",
        f"<dt>time in each phase</dt><dd>{_phases(facts.phases)}</dd>",
        "</dl>",
    ]
    if facts.error:
        parts.append(f'<section class="error"><h2>Last error</h2><p id="error">{escape(facts.error)}</p></section>')
    warnings = [e for e in facts.events if e.kind == "warning"]  # the job went on (vflserver.training.divergence)
    if warnings:
        said = "".join(f"<p>{_when(e.at)}: {escape(e.message)}</p>" for e in warnings)
        parts.append(f'<section class="error" id="warnings"><h2>Warnings</h2>{said}</section>')
    if facts.psi_progress:
        parts.append("<h2>PSI, chunk by chunk</h2>")
        rows = (
            (escape(stream), f"{done} of {of}", f"{100 * done / of:.0f} %" if of else "–")
            for stream, (done, of) in sorted(facts.psi_progress.items())
        )
        parts.append(_table(("stream", "chunks", "done"), rows, "psi"))
    parts.append("<h2>Timeline</h2>")
    parts.append(
        _table(
            ("at", "what", "state", "message"),
            (
                (_when(e.at), escape(e.kind), _state(e.state), escape(_event_text(e.message, e.epoch)))
                for e in facts.events
            ),
            "timeline",
        )
    )
    parts.append("<h2>Loss and metrics per epoch</h2>")
    parts.append(_curves(facts))
    parts.append("<h2>Bytes on the wire</h2>")
    parts.append(_wire(facts))
    parts.append("<h2>Privacy</h2>")
    parts.append(_privacy(facts.privacy))
    parts.append("<h2>Served models</h2>")
    if facts.served:
        parts.append(_table(("model", "readiness"), ((escape(n), escape(s)) for n, s in facts.served), "served"))
    else:
        parts.append('<p class="muted">Not served (the job has not finished, or serving is off).</p>')
    if r.final_metrics:
        parts.append("<h2>Final metrics</h2>" + _metrics(r.final_metrics))
    if r.student_metrics:
        parts.append("<h2>The student (the active party alone)</h2>" + _metrics(r.student_metrics))
    return page(f"Job {r.job_id}", "".join(parts), live=f"job:{r.job_id}")


def _event_text(message: str, epoch: Any) -> str:
    if epoch is None:
        return message
    return f"epoch {epoch.epoch + 1}: train loss {epoch.train_loss:.4g}, test loss {epoch.test_loss:.4g}"


def _curves(facts: JobFacts) -> str:
    if not facts.epochs:
        return '<p class="muted">No epoch has finished yet.</p>'
    losses = {
        "train loss": [e.train_loss for e in facts.epochs],
        "test loss": [e.test_loss for e in facts.epochs],
    }
    names = sorted({name for e in facts.epochs for name in e.metrics})
    metrics = {name: [e.metrics.get(name, math.nan) for e in facts.epochs] for name in names}
    rows = (
        (str(e.epoch + 1), _number(e.train_loss), _number(e.test_loss), f"{e.seconds:.1f} s", f"{e.wire_bytes:,}")
        for e in facts.epochs
    )
    table = _table(("epoch", "train loss", "test loss", "seconds", "bytes on the wire"), rows, "epochs")
    charts = line_chart("loss", losses) + (line_chart("metrics", metrics) if metrics else "")
    return f'<div class="charts">{charts}</div>{table}'


def _number(value: float) -> str:
    return "–" if not math.isfinite(value) else f"{value:.4g}"


def _wire(facts: JobFacts) -> str:
    if not facts.wire_bytes:
        total = sum(e.wire_bytes for e in facts.epochs)
        return f'<p class="muted">Per party once the job has ended; so far {total:,} bytes in all.</p>'
    order = ("PSI", "training", "evaluation", "inference", "other")
    phases = [ph for ph in order if any(ph in counts for counts in facts.wire_bytes.values())]
    rows = (
        (f"party {escape(p)}", *(f"{counts.get(ph, 0):,}" for ph in phases), f"{sum(counts.values()):,}")
        for p, counts in sorted(facts.wire_bytes.items())
    )
    head = ("party", *(f"{escape(ph)}, bytes" for ph in phases), "in all")
    return _table(head, rows, "wire") + '<p class="muted">Sent and received by the active party, with each party.</p>'


def _privacy(privacy: Mapping[str, Any]) -> str:
    if not privacy:
        return '<p class="muted">No defence: every [privacy] setting is off.</p>'
    rows = []
    for key, value in sorted(privacy.items()):
        if isinstance(value, dict):
            shown = ", ".join(f"{escape(str(k))} {escape(_plain(v))}" for k, v in sorted(value.items()))
            rows.append((escape(key), shown))
        else:
            rows.append((escape(key), escape(_plain(value))))
    return _table(("setting", "value (ε spent where DP applies)"), rows, "privacy")


def _plain(value: Any) -> str:
    if value is None:
        return "unbounded"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _metrics(metrics: Mapping[str, float]) -> str:
    return _table(("metric", "value"), ((escape(k), _number(v)) for k, v in sorted(metrics.items())), "metrics")


def parties_page(parties: list[PartyFacts]) -> str:
    rows = (
        (
            f"party {p.party}",
            '<span class="state online">online</span>' if p.online else '<span class="state offline">offline</span>',
            "never" if p.seconds_since_seen is None else f"{_seconds(p.seconds_since_seen)} ago",
            escape(p.client_version) or "–",
            "–" if p.certificate_days_left is None else f"{p.certificate_days_left:.0f} days",
            escape(", ".join(p.expected_by)) or "–",
        )
        for p in parties
    )
    body = _table(("party", "status", "last seen", "client version", "certificate expires in", "expected by"), rows)
    if not parties:
        body = '<p class="muted">No party has called, and no job expects one.</p>'
    return page("Parties", body, live="poll")


def server_page(facts: ServerFacts) -> str:
    listeners = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in sorted(facts.listeners.items()))
    metrics = (
        f'<a href="{escape(facts.metrics_url)}">{escape(facts.metrics_url)}</a>'
        if facts.metrics_url
        else "off ([metrics] enabled = false)"
    )
    body = (
        '<dl class="facts">'
        f"<dt>version</dt><dd>{escape(facts.version)}</dd>"
        f"<dt>up for</dt><dd>{_seconds(facts.uptime_s)}</dd>"
        f"{listeners}"
        f"<dt>run folder</dt><dd>{facts.run_dir_bytes / 2**20:,.1f} MiB used, "
        f"{facts.disk_free_bytes / 2**30:,.1f} GiB free on its disk</dd>"
        f"<dt>metrics</dt><dd>{metrics}</dd>"
        "</dl>"
    )
    return page("Server", body, live="poll")


def not_found(what: str) -> str:
    return page("Not found", f"<p>{escape(what)}</p>")


__all__ = ["REFRESH_S", "job_page", "jobs_page", "not_found", "page", "parties_page", "server_page"]
