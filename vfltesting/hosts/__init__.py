"""Parties on separate hosts, on one machine: each in its own Linux network namespace.

Production parties sit on different machines in different organisations; the rest of the suite
runs them side by side over loopback. Here every party (and the operator) gets a network
namespace with its own address and host name on a switch the test owns, its own venv with the
project installed from a wheel, and its own folder of data, certificates and config, as
``docs/tutorials/separate-hosts.md`` ("Installing on a host") tells an operator to set them up. The link
between a host and the switch is a veth pair that a test can take down, bring up, or slow down
with ``tc tbf``: faults happen in the kernel's network, not in a proxy.

- ``network``: the namespaces, the switch, the links and their faults; cleaned up on exit.
- ``install``: the wheel (built once per test session) and one venv per host.
- ``deployment``: certificates from ``vfl-certs``, configs, and the daemons run in their hosts.
- ``console``: the operator's program on the operator's host (jobs and inference calls).
"""
