"""Files a host needs to run the product, shipped in the package: the systemd units.

``vfl-certs bundle`` puts the right one in each host's archive; ``examples/systemd`` links here.
"""
