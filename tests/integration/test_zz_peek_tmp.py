import numpy as np
from tests.integration.test_reference_equivalence import digits, diabetes, one_torch_thread  # noqa

def test_peek(digits, diabetes):
    for run in (digits, diabetes):
        f, r = np.array(run.federated_losses), np.array(run.reference.step_losses)
        d = np.abs(f - r)
        print("\nsteps", len(f), "maxdiff", d.max(), "first nonzero", np.flatnonzero(d)[:5], d[np.flatnonzero(d)[:5]])
