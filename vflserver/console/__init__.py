"""The operator's console: a read-only web view of the server's jobs, parties and health (``[console]``).

``facts`` gathers what may be shown, from the job store, the board and the run folder; ``pages``
renders it as small server-side HTML with inline SVG charts (``charts``); ``server`` serves it to
operator certificates only, over mutual TLS, with a strict Content-Security-Policy. See
docs/how-to/console.md ("The console").
"""
