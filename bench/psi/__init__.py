"""PSI 1M × 1M: ``vfl-server --psi-only`` and one ``vfl-client`` as OS processes over mutual TLS.

The deployment shape: the active party (``vfl-server --psi-only``) and passive party 2
(``vfl-client --party 2``) are separate processes on 127.0.0.1, with certificates made by
``vflcore.security.certs``. Each party holds 1,000,000 IDs (``user-0000123``), half of them shared, in its
own CSV with only an ``id`` column, rows shuffled differently. The job id is fresh per run and the
run directory is a new temporary one, so no saved alignment is ever reused.

What is reported, and what the target applies to:

- **PSI seconds (headline)**: the server's own ``aligned ... in X s``. It starts once every party
  has joined (both CSVs read, processes started) and ends when the aligned rows are selected and
  every party's aligned-list digest is checked. It covers the ID-set digest, both hash+blind
  passes, both second blindings, the transfers, matching and the check. The target
  (<= 60 s) applies to this figure.
- **Process wall**: from starting ``vfl-server`` to both processes having exited. It adds
  interpreter start-up, imports, reading both 1M-row CSVs (the client starts only once the
  server listens, and the server reads its CSV before it listens) and shutdown. Printed for
  honesty, not compared with the target.
- IDs/s, CPU per party, a CPU timeline (cores used by each party's process tree every few
  seconds, which shows one side idling while the other blinds), peak memory per party (main
  process from ``os.wait4``; main + PSI workers sampled from /proc), payload and measured bytes.
- This box's X25519 speed in the same run (``openssl speed`` and ``cryptography`` per op), so
  the figure can be scaled to other machines. ECDH-PSI costs, per party, one hash-to-curve and two
  X25519 multiplications per ID; with both parties on one 2-core box the floor is about
  ``2 parties × 1M × (2 × x25519 + hash) / 2 cores``.
- Optionally, openmined.psi 2.0.6 on the same ID sets (server and client as two processes,
  message bytes over pipes, no TLS), installed into its own virtualenv (``/tmp/ompsi-venv``)
  because it pins protobuf==6.30.2. It is bounded in time: a 50k × 50k calibration run projects
  the 1M × 1M time; above ``--openmined-budget`` seconds it runs on fewer IDs and scales linearly
  (labelled as such).

PSI workers: ``[psi] workers`` is 2 per party (``--workers``). On this 2-core box, with both
parties running at once, 2 workers per party beat 1 (``--compare-workers`` runs both; at 1M:
134.5 s against 166.3 s). With 1 worker a party blinds in its own process (``blinder_for``) and
can use one core at most, so whenever the other party waits (at the end the client has nothing
left to blind while the server still has) a core sits idle; with 2 workers the busy party takes
both. The in-process path also used ~15 % more CPU per party in that measurement (not analysed
further). Before workers stopped re-importing the daemon's main module (``vflcore.psi.blinding``,
3 s of CPU and ~290 MiB per worker), 1 worker was the faster setting at 300k IDs.

SecretFlow (``--secretflow auto``, the default): SecretFlow's own two-party PSI, ``spu.psi`` from the
spu 0.9.5 wheel, on the same two CSVs, rank 0 and rank 1 as two OS processes over spu's brpc link on
localhost, in a venv of its own (``/tmp/spu-venv``, Python 3.11: spu pins numpy<2 and jax<=0.4.34),
made on demand; if it cannot be made the bench says why and goes on. It is the reference that
matters: an open-source PSI tuned by its authors, measured on this box in the same run. Per
protocol (``--secretflow-protocols``; by default ECDH on Curve25519, on Curve25519 with Elligator2 up to
1M IDs, on FourQ, and RR22) it reports the wall seconds from the first party entering
``psi_execute`` to the last leaving it, and each party's CPU and peak RSS, next to ours in one table.

The last two lines are machine-readable: ``BENCH psi_1m_wall <s> s target <= 60 MET|MISSED``, then
``BENCH psi_1m_vs_secretflow_ecdh <ratio> x target <= 1.0 MET|MISSED`` (our PSI seconds over SecretFlow
ECDH-25519's wall seconds; ``nan`` and MISSED, with a line saying why, where SecretFlow could not run).
Exit code 0 whether the targets are met or missed; 1 if the PSI failed or found a wrong intersection.

Run: ``make bench-psi`` or ``.venv/bin/python -m bench.psi [--ids N] [--workers W]
[--compare-workers] [--openmined auto|full|skip] [--openmined-budget S] [--secretflow auto|skip]
[--secretflow-protocols P ...] [--keep]``.

The package, one job a module: ``__main__`` (the options and the order of the steps), ``speed``
(this box's X25519 speed), ``inputs`` (the two ID CSVs and the certificates), ``run`` (one PSI run:
the two daemons as OS processes, their logs, the intersection check), ``monitor`` (the /proc and
``ss`` sampling while they run), ``comparison`` (openmined.psi in its own virtualenv, bounded in
time), ``openmined`` (the script that venv runs), ``secretflow_comparison`` and ``secretflow`` (the same
for SecretFlow's spu) and ``report`` (the figures and the BENCH lines).
"""
